import { compressRanks, oneLine } from '../common/rankList';

/** The canonical spelling `rtdebug check` answers ("" = off): only these characters, so it is its own literal. */
const CANONICAL = /^[a-z0-9:=,]{0,200}$/;

/**
 * What each rank evaluates (`rtdebug.rank.api.configure_stop_on`), given the canonical spelling `rtdebug check`
 * answered. Its one-line answer comes back hex-encoded: DAP's `evaluate` answers a str as its repr, and hex
 * digits are the same in any repr, so the line is read back without parsing Python's quoting.
 */
export function configureExpression(canonical: string): string {
  if (!CANONICAL.test(canonical)) throw new Error(`not a canonical --stop-on spelling: ${JSON.stringify(canonical.slice(0, 80))}`);
  return `__import__('rtdebug.rank.api', fromlist=['_']).configure_stop_on('${canonical}').encode().hex()`;
}

/** A rank's answer to configureExpression (`'7274…'`) → its line; anything else (an exception text) as it came. */
export function fromHexAnswer(result: string): string {
  const m = /^(['"])((?:[0-9a-f]{2})*)\1$/.exec(result.trim());
  return m ? Buffer.from(m[2], 'hex').toString('utf8') : result;
}

/**
 * The per-rank answers of "Stop All Ranks When…" in one message. Each rank answers one line
 * (`rtdebug: rank N stops on <spec>`, `rtdebug: rank N: --stop-on is off`, or `rtdebug: <error>`); ranks
 * that said the same are named together (`ranks 0-3 stop on nonfinite`), so 1024 ranks still make one line,
 * and every rank that did not take the conditions is named with why. Pure.
 */
export interface RankAnswer {
  rank: number;
  /** The rank's own line: DAP evaluate's result for configureExpression (hex in a str repr), as it came. */
  result?: string;
  /** Why no answer came (the pause did not land, the evaluate failed). */
  error?: string;
}

export interface AnswersMessage {
  text: string;
  level: 'info' | 'warning' | 'error';
  /** Ranks that now stop on the conditions (or turned them off, as asked). */
  ok: number[];
}

const STOPS = /^rtdebug: rank \d+ stops on (.+)$/;
const OFF = /^rtdebug: rank \d+: --stop-on is off$/;

type Outcome = { key: string; ok: boolean; say: (ranks: number[]) => string };

function outcome(a: RankAnswer): Outcome {
  if (a.error !== undefined || a.result === undefined) {
    const why = oneLine(a.error, 200) ?? 'no answer';
    return { key: `x${why}`, ok: false, say: (r) => `${word(r)}: not set (${why})` };
  }
  const line = oneLine(fromHexAnswer(a.result), 300) ?? '(empty answer)';
  let m: RegExpExecArray | null;
  if ((m = STOPS.exec(line))) {
    const cond = m[1];
    return { key: `s${cond}`, ok: true, say: (r) => `${word(r)} ${r.length === 1 ? 'stops' : 'stop'} on ${cond}` };
  }
  if (OFF.test(line)) return { key: 'off', ok: true, say: (r) => `${word(r)}: --stop-on is off` };
  // the harness's refusal (`rtdebug: <why>`), or something else the rank said: shown as it said it
  const said = line.replace(/^rtdebug: /, '');
  return { key: `e${said}`, ok: false, say: (r) => `${word(r)}: ${said}` };
}

const word = (ranks: number[]) => `${ranks.length === 1 ? 'rank' : 'ranks'} ${compressRanks(ranks)}`;

/** `notAttached`: ranks of the session with no debug session in this window (nothing was set there). */
export function answersMessage(answers: RankAnswer[], notAttached: number[] = []): AnswersMessage {
  const groups = new Map<string, { o: Outcome; ranks: number[] }>();
  for (const a of [...answers].sort((x, y) => x.rank - y.rank)) {
    const o = outcome(a);
    const g = groups.get(o.key) ?? { o, ranks: [] };
    g.ranks.push(a.rank);
    groups.set(o.key, g);
  }
  // what went wrong first, then what was set
  const all = [...groups.values()].sort((x, y) => Number(x.o.ok) - Number(y.o.ok) || x.ranks[0] - y.ranks[0]);
  const parts = all.map((g) => g.o.say(g.ranks));
  if (notAttached.length) parts.push(`${word(notAttached)} not attached here: not set`);
  const ok = all.filter((g) => g.o.ok).flatMap((g) => g.ranks);
  const failed = answers.length - ok.length + notAttached.length;
  return {
    text: `rtdebug: ${parts.join('; ') || 'no rank is attached here'}`,
    level: !ok.length ? 'error' : failed ? 'warning' : 'info',
    ok: ok.sort((a, b) => a - b),
  };
}

/**
 * Some ranks took the conditions and some did not: an armed rank joins one vote per step, so the armed ones
 * would wait there for the others for good. Every rank takes them, or none: those are turned off again.
 */
export const mustTurnOff = (spec: string, msg: AnswersMessage, ranks: number): boolean =>
  !!spec && msg.ok.length > 0 && msg.ok.length < ranks;

/** The message once the ranks that took it were turned off again (`error`: that failed too). */
export function turnedOff(msg: AnswersMessage, error?: string): AnswersMessage {
  const who = `${msg.ok.length === 1 ? 'rank' : 'ranks'} ${compressRanks(msg.ok)}`;
  return {
    text: `${msg.text}; ${error === undefined ? `turned off again in ${who} (every rank takes it, or none)` : `could not turn it off again in ${who} (${error}): they may wait for the others at the next step`}`,
    level: 'error',
    ok: [],
  };
}

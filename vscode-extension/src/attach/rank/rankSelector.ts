import { CheckRun, checkRanks } from '../../common/harnessCheck';
import { compressRanks } from '../../common/rankList';

/**
 * "Attach to Ranks…": which ranks a selector chooses in a session — rank numbers (`0,2-3`) or mesh
 * coordinates (`tp=0`, `dp=0,tp=*`, `pp=1:3`, `dp=(0,2)`) resolved against the verified entries' meshes —
 * as the CLI resolves them: `rtdebug check --rank SEL --session ID` answers the ranks, or its one-line refusal.
 */
export class SelectorError extends Error {}

/** The ranks `text` chooses in session `session`; throws SelectorError with the CLI's line. */
export async function chooseRanks(run: CheckRun, text: string, session: string): Promise<number[]> {
  const c = await checkRanks(run, text, session);
  if (!c.valid) throw new SelectorError(c.error);
  return c.ranks ?? [];
}

/** The input box's hint: what can be typed here, with the session's dimensions (as the CLI lists them). */
export async function selectorPrompt(run: CheckRun, session: string): Promise<string> {
  const c = await checkRanks(run, '', session);
  return `Rank numbers (0,2-3) or mesh coordinates (tp=0, dp=0,tp=*, pp=1:3, dp=(0,2)); dimensions: ${c.dimensions ?? '?'}`;
}

/** What a valid selector chooses, for the input box while typing: `ranks 0,2 (2 of 4)`; or the refusal. */
export async function selectorPreview(run: CheckRun, text: string, session: string): Promise<{ ok: boolean; message: string }> {
  try {
    const c = await checkRanks(run, text, session);
    if (!c.valid) return { ok: false, message: c.error };
    const r = c.ranks ?? [];
    return { ok: true, message: `${r.length === 1 ? 'rank' : 'ranks'} ${compressRanks(r)} (${r.length} of ${c.world_size})` };
  } catch (e) {
    return { ok: false, message: (e as Error).message };
  }
}

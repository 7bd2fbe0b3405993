import { pyRepr } from '../common/pyText';
import { compressRanks } from '../common/rankList';
import { dimsOf, dimsText, isMeshSelector, resolveSelector, SelectorError } from '../registry/meshes';
import { Session } from '../registry/registryModel';
import { parseRankList, RankSpecError } from './rankSpec';

/**
 * "Attach to Ranks…": which ranks a selector chooses in a session, as `rtdebug attach --rank` chooses them
 * (harness/rtdebug/commands/attach.py): rank numbers (`0,2-3`) or mesh coordinates (`tp=0`, `dp=0,tp=*`,
 * `pp=1:3`, `dp=(0,2)`) resolved against the verified entries' meshes; every refusal is the CLI's line. Pure.
 */
export { SelectorError };

/** The job's world size: a rank entry's, else `--nnodes` (N or MIN:MAX) × ranks per node (table.world_size). */
export function worldSize(s: Session): number {
  if (s.ranks.length) return s.ranks[0].world_size;
  return Number(String(s.entry.nnodes).split(':').pop()) * s.entry.nproc_per_node;
}

export function chooseRanks(text: string, s: Session): number[] {
  const spec = text.trim();
  const sid = s.entry.session_id;
  let ranks: number[];
  if (isMeshSelector(spec)) {
    // a store entry anyone could have written does not get to define the coordinates
    ranks = resolveSelector(
      spec,
      s.ranks.filter((r) => r.verified !== false),
    );
  } else {
    try {
      ranks = parseRankList(spec, worldSize(s));
    } catch (e) {
      // attach.py's line for a bad --rank, with the extension's rank lists in it
      if (e instanceof RankSpecError)
        throw new SelectorError(`--rank ${pyRepr(spec)}: a rank list such as 0,2-3 or mesh coordinates such as tp=1 or dp=0,tp=*`);
      throw e;
    }
  }
  if (!ranks.length) throw new SelectorError(`--rank ${spec} selects no rank`);
  const world = worldSize(s);
  const out = ranks.find((r) => !(r >= 0 && r < world));
  if (out !== undefined) throw new SelectorError(`rank ${out} is out of range: session ${sid} has world size ${world}`);
  return ranks;
}

/** The input box's hint: what can be typed here, with the session's dimensions. */
export function selectorPrompt(s: Session): string {
  const dims = dimsOf(s.ranks.filter((r) => r.verified !== false));
  return `Rank numbers (0,2-3) or mesh coordinates (tp=0, dp=0,tp=*, pp=1:3, dp=(0,2)); dimensions: ${dimsText(dims)}`;
}

/** What a valid selector chooses, for the input box while typing: `ranks 0,2 (2 of 4)`; or the refusal. */
export function selectorPreview(text: string, s: Session): { ok: boolean; message: string } {
  try {
    const r = chooseRanks(text, s);
    return { ok: true, message: `${r.length === 1 ? 'rank' : 'ranks'} ${compressRanks(r)} (${r.length} of ${worldSize(s)})` };
  } catch (e) {
    return { ok: false, message: (e as Error).message };
  }
}

/**
 * Rank lists and one-line text as the harness prints them, for every view that names ranks or shows text
 * that came from a rank (or from a store a peer could write: jobwide answers may be forged).
 */

/** [0,2,3,4,7] → "0,2-4,7" (the harness's rank-list syntax). */
export function compressRanks(ranks: number[]): string {
  const s = [...new Set(ranks)].sort((a, b) => a - b);
  const out: string[] = [];
  for (let i = 0; i < s.length;) {
    let j = i;
    while (j + 1 < s.length && s[j + 1] === s[j] + 1) j++;
    out.push(j > i ? `${s[i]}-${s[j]}` : `${s[i]}`);
    i = j + 1;
  }
  return out.join(',');
}

/** "rank 1" / "ranks 0,2-3" (rtdebug.stacks.group `ranks_word`). */
export const ranksWord = (ranks: number[]): string => `${new Set(ranks).size === 1 ? 'rank' : 'ranks'} ${compressRanks(ranks)}`;

/** A non-negative integer, else undefined. */
export const nat = (v: unknown): number | undefined => (typeof v === 'number' && Number.isInteger(v) && v >= 0 ? v : undefined);

/**
 * One line of at most `max` characters: C0/C1 control characters (newlines included) become "?", as the
 * harness prints them, so a forged answer cannot break a tree row into several or hide text.
 */
export function oneLine(v: unknown, max: number): string | undefined {
  if (typeof v !== 'string') return undefined;
  // eslint-disable-next-line no-control-regex
  const s = v.replace(/[\u0000-\u001f\u007f-\u009f]/g, '?').trim();
  return s ? s.slice(0, max) : undefined;
}

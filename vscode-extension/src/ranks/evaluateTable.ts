/**
 * "Evaluate in All Ranks": one expression, the value in every stopped rank, as a Markdown table with the
 * values that differ from the majority marked — a loss or a shape that diverged between ranks stands out.
 */
export interface EvalRow {
  rank: number;
  value?: string;
  error?: string;
  where?: string;
}

/** The most common value (ties: the one seen first); undefined when there are no values. */
export function majority(values: string[]): string | undefined {
  const counts = new Map<string, number>();
  for (const v of values) counts.set(v, (counts.get(v) ?? 0) + 1);
  let best: string | undefined;
  let n = 0;
  for (const [v, c] of counts)
    if (c > n) {
      best = v;
      n = c;
    }
  return best;
}

/** Rows marked `differs` hold a value other than the majority's, only when there is a strict majority. */
export function markDivergent(rows: EvalRow[]): (EvalRow & { differs: boolean })[] {
  const vals = rows.filter((r) => r.error === undefined).map((r) => r.value ?? '');
  const maj = majority(vals);
  const strict = maj !== undefined && vals.filter((v) => v === maj).length * 2 > vals.length;
  const allSame = new Set(vals).size <= 1;
  return rows.map((r) => ({ ...r, differs: !allSame && r.error === undefined && (!strict || (r.value ?? '') !== maj) }));
}

const cell = (s: string) => s.replace(/\\/g, '\\\\').replace(/\|/g, '\\|').replace(/\r?\n/g, ' ⏎ ').replace(/`/g, 'ˋ');

export function evaluateMarkdown(expression: string, session: string, rows: EvalRow[], skipped: number[] = []): string {
  const marked = markDivergent([...rows].sort((a, b) => a.rank - b.rank));
  const nDiff = marked.filter((r) => r.differs).length;
  const lines = [
    `# \`${cell(expression)}\` in every stopped rank`,
    '',
    `Session \`${session}\` · ${rows.length} rank(s) evaluated${skipped.length ? ` · not stopped (skipped): ${skipped.join(', ')}` : ''}` +
      ` · ${nDiff ? `**${nDiff} differ from the majority** (marked ⚠)` : 'all values agree'}`,
    '',
    '| rank | value | | frame |',
    '| ---: | --- | :---: | --- |',
  ];
  for (const r of marked) {
    const v = r.error !== undefined ? `*error:* ${cell(r.error)}` : `\`${cell(r.value ?? '')}\``;
    lines.push(`| ${r.rank} | ${v} | ${r.differs ? '⚠ differs' : ''} | ${cell(r.where ?? '')} |`);
  }
  return lines.join('\n') + '\n';
}

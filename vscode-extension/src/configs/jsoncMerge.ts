import * as jsonc from 'jsonc-parser';

/**
 * Edits one array of named entries in a JSON-with-comments document (launch.json's "configurations",
 * tasks.json's "tasks", ...) with jsonc-parser edits, so every byte outside the entries we own (comments,
 * the user's own entries, formatting) is left as it was. Owned entries are replaced in place, new ones
 * appended, owned ones no longer generated removed; an entry already equal to what we would write is not
 * touched, which makes a second run a no-op.
 */
export class JsoncSyntaxError extends Error {}

export interface MergeSpec {
  key: string; // top-level array property
  nameKey: string; // the property that names an entry: "name", "label", "id"
  entries: Record<string, unknown>[]; // what we generate
  owned: (name: string) => boolean; // entries we may replace or remove
}

export function detectFormatting(text: string): jsonc.FormattingOptions {
  const indent = /^([ \t]+)\S/m.exec(text)?.[1];
  const eol = text.includes('\r\n') ? '\r\n' : '\n';
  if (indent?.startsWith('\t')) return { insertSpaces: false, tabSize: 4, eol };
  return { insertSpaces: true, tabSize: indent ? indent.length : 4, eol };
}

function parseRoot(text: string, file: string): Record<string, unknown> {
  const errors: jsonc.ParseError[] = [];
  const root = jsonc.parse(text, errors, { allowTrailingComma: true, disallowComments: false });
  if (errors.length) {
    const e = errors[0];
    throw new JsoncSyntaxError(`${file}: ${jsonc.printParseErrorCode(e.error)} at offset ${e.offset}; fix the file and run again`);
  }
  if (typeof root !== 'object' || root === null || Array.isArray(root)) throw new JsoncSyntaxError(`${file}: top level is not an object`);
  return root as Record<string, unknown>;
}

function edit(text: string, path: jsonc.JSONPath, value: unknown, fmt: jsonc.FormattingOptions, insert = false): string {
  return jsonc.applyEdits(text, jsonc.modify(text, path, value, { formattingOptions: fmt, isArrayInsertion: insert }));
}

export function deepEqual(a: unknown, b: unknown): boolean {
  return JSON.stringify(canonical(a)) === JSON.stringify(canonical(b));
}

function canonical(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(canonical);
  if (v && typeof v === 'object') {
    return Object.fromEntries(
      Object.keys(v)
        .sort()
        .map((k) => [k, canonical((v as Record<string, unknown>)[k])]),
    );
  }
  return v;
}

export function mergeNamedEntries(text: string, spec: MergeSpec, file = 'file'): string {
  const fmt = detectFormatting(text);
  const array = (): Record<string, unknown>[] => {
    const v = parseRoot(text, file)[spec.key];
    if (v !== undefined && !Array.isArray(v)) throw new JsoncSyntaxError(`${file}: "${spec.key}" is not an array`);
    return (v ?? []) as Record<string, unknown>[];
  };
  const nameOf = (e: unknown) => (e && typeof e === 'object' ? String((e as Record<string, unknown>)[spec.nameKey] ?? '') : '');
  if (parseRoot(text, file)[spec.key] === undefined) {
    if (!spec.entries.length) return text;
    text = edit(text, [spec.key], [], fmt);
  }
  for (const entry of spec.entries) {
    const current = array();
    const idx = current.findIndex((e) => nameOf(e) === nameOf(entry));
    if (idx >= 0 && deepEqual(current[idx], entry)) continue;
    text = idx >= 0 ? edit(text, [spec.key, idx], entry, fmt) : edit(text, [spec.key, current.length], entry, fmt, true);
  }
  const wanted = new Set(spec.entries.map(nameOf));
  const current = array();
  for (let i = current.length - 1; i >= 0; i--) {
    const n = nameOf(current[i]);
    if (spec.owned(n) && !wanted.has(n)) text = edit(text, [spec.key, i], undefined, fmt);
  }
  return text;
}

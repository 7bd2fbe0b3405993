/**
 * Python's spelling of strings, for two reasons: the harness's error lines quote user input with `repr()`
 * or `ascii()` (`unknown condition 'x'`, `unknown mesh dimension 'pp'`), and the extension says the same
 * line byte for byte, so a user sees one wording whichever side refused; and DAP `evaluate` answers a
 * Python `str` as its repr (`'rtdebug: rank 0 stops on nonfinite'`), which has to be read back.
 */

/** Python's str.isprintable(), per code point: categories C* and Z* are not printable, except ' '. */
const NON_PRINTABLE = /[\p{C}\p{Z}]/u;

function escapeCode(cp: number): string {
  if (cp <= 0xff) return `\\x${cp.toString(16).padStart(2, '0')}`;
  if (cp <= 0xffff) return `\\u${cp.toString(16).padStart(4, '0')}`;
  return `\\U${cp.toString(16).padStart(8, '0')}`;
}

function quote(s: string, asciiOnly: boolean): string {
  const q = s.includes("'") && !s.includes('"') ? '"' : "'";
  let out = q;
  for (const ch of s) {
    const cp = ch.codePointAt(0)!;
    if (ch === '\\') out += '\\\\';
    else if (ch === q) out += `\\${q}`;
    else if (ch === '\t') out += '\\t';
    else if (ch === '\n') out += '\\n';
    else if (ch === '\r') out += '\\r';
    else if (cp < 0x20 || cp === 0x7f) out += escapeCode(cp);
    else if (cp < 0x7f) out += ch;
    else if (asciiOnly || (ch !== ' ' && NON_PRINTABLE.test(ch))) out += escapeCode(cp);
    else out += ch;
  }
  return out + q;
}

/** Python's `repr(s)` for a str. */
export const pyRepr = (s: string): string => quote(s, false);
/** Python's `ascii(s)` for a str. */
export const pyAscii = (s: string): string => quote(s, true);
/** Python's `s[:n]`: code points, not UTF-16 units. */
export const pySlice = (s: string, n: number): string => Array.from(s).slice(0, n).join('');

const SIMPLE: Record<string, string> = {
  '\\': '\\',
  "'": "'",
  '"': '"',
  n: '\n',
  r: '\r',
  t: '\t',
  a: '\x07',
  b: '\b',
  f: '\f',
  v: '\v',
  '0': '\0',
};

/**
 * A Python str literal as repr() writes it (what debugpy's evaluate answers for a str) → its text;
 * anything else (an int, an exception text, a truncated repr) comes back unchanged.
 */
export function fromPyRepr(text: string): string {
  const q = text[0];
  if (text.length < 2 || (q !== "'" && q !== '"') || text[text.length - 1] !== q) return text;
  let out = '';
  for (let i = 1; i < text.length - 1; i++) {
    const ch = text[i];
    if (ch === q) return text; // an unescaped quote inside: not one literal
    if (ch !== '\\') {
      out += ch;
      continue;
    }
    const e = text[++i];
    const width = e === 'x' ? 2 : e === 'u' ? 4 : e === 'U' ? 8 : 0;
    if (width) {
      const hex = text.slice(i + 1, i + 1 + width);
      if (!/^[0-9a-fA-F]+$/.test(hex) || hex.length !== width) return text;
      out += String.fromCodePoint(parseInt(hex, 16));
      i += width;
    } else if (e in SIMPLE) out += SIMPLE[e];
    else return text;
  }
  return out;
}

/** Python's `"".join(c if c.isprintable() else "?" for c in s)`: how `rtdebug ps` shows text a rank wrote. */
export const pyPrintable = (s: string): string => Array.from(s, (c) => (c !== ' ' && NON_PRINTABLE.test(c) ? '?' : c)).join('');

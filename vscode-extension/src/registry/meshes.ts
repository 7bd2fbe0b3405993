import { pyRepr } from '../common/pyText';

/**
 * Each rank's DeviceMeshes (its entry's `meshes`: root and flattened meshes the job made; issue 31) and the
 * selector grammar that chooses ranks by coordinates, as harness/rtdebug/common/selector.py has them:
 * `tp=0`, `dp=0,tp=*`, `pp=1:3` (end excluded), `dp=(0,2)`, terms ANDed; an unknown dimension or an
 * out-of-range coordinate is one line listing the valid ones, in the harness's words. An entry may come
 * from a store anyone on that network could write: meshes are read as the harness reads them (names
 * `[A-Za-z_][A-Za-z0-9_]*`, integers, coord < shape, at most 8 dims), at most 16 per rank; anything else is
 * not a mesh. Pure.
 */
export interface Mesh {
  dims: string[];
  shape: number[];
  coord: number[];
  /** The process group of each dim, and torch's description of it (`mesh_dp`), when given. */
  groups?: string[];
  descs?: string[];
}

export const MAX_MESHES = 16;
export const MAX_DIMS = 8;
const NAME = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;
const int = (x: unknown): x is number => typeof x === 'number' && Number.isInteger(x) && x >= 0 && x < 1 << 20;
const strs = (v: unknown, n: number): string[] | undefined =>
  Array.isArray(v) && v.length === n && v.every((x) => typeof x === 'string' && x.length <= 200) ? (v as string[]) : undefined;

export function parseMeshes(raw: unknown): Mesh[] {
  if (!Array.isArray(raw)) return [];
  const out: Mesh[] = [];
  for (const m of raw.slice(0, MAX_MESHES)) {
    if (typeof m !== 'object' || m === null) continue;
    const { dims, shape, coord, groups, descs } = m as Record<string, unknown>;
    if (!Array.isArray(dims) || !Array.isArray(shape) || !Array.isArray(coord)) continue;
    if (!(dims.length === shape.length && shape.length === coord.length && coord.length <= MAX_DIMS)) continue;
    if (!dims.every((d) => typeof d === 'string' && NAME.test(d))) continue;
    if (![...shape, ...coord].every(int)) continue;
    if (coord.some((c, i) => c >= shape[i])) continue;
    out.push({ dims, shape, coord, groups: strs(groups, dims.length), descs: strs(descs, dims.length) });
  }
  return out;
}

interface HasMeshes {
  rank: number;
  meshes?: Mesh[];
}

/** Every dimension the ranks' meshes name, with its size, in the order first seen (selector.dims_of). */
export function dimsOf(ranks: HasMeshes[]): Map<string, number> {
  const sizes = new Map<string, number>();
  for (const r of ranks) for (const m of r.meshes ?? []) m.dims.forEach((d, i) => sizes.has(d) || sizes.set(d, m.shape[i]));
  return sizes;
}

/** The rank's coordinate in every dimension (the first mesh that names a dim wins; selector.coords_of). */
export function coordsOf(r: HasMeshes): Map<string, number> {
  const out = new Map<string, number>();
  for (const m of r.meshes ?? []) m.dims.forEach((d, i) => out.has(d) || out.set(d, m.coord[i]));
  return out;
}

/** `dp=0, tp=1`: the coordinates `rtdebug ps` shows (selector.label); "" without meshes. */
export const coordLabel = (r: HasMeshes): string => [...coordsOf(r)].map(([d, c]) => `${d}=${c}`).join(', ');

/** `dp (0-1), tp (0-3)`: the valid dimensions, as the harness lists them in its errors. */
export const dimsText = (sizes: Map<string, number>): string =>
  [...sizes].map(([d, s]) => `${d} (0-${s - 1})`).join(', ') || 'none: the job has made no DeviceMesh yet';

export class SelectorError extends Error {}

interface Term {
  dim: string;
  values?: number[]; // undefined: '*'
  text: string;
}

const TERM = /^([A-Za-z_][A-Za-z0-9_]{0,63})=(\*|\d{1,6}|\d{1,6}:\d{1,6}|\(\d{1,6}(?:,\d{1,6}){0,255}\))$/;

/** A mesh selector (it has an "="), as opposed to a rank list (`0,2-3`). */
export const isMeshSelector = (text: string): boolean => text.includes('=');

/** Split on commas outside parentheses (selector._split). */
function split(text: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let cur = '';
  for (const ch of text) {
    depth += ch === '(' ? 1 : ch === ')' ? -1 : 0;
    if (ch === ',' && depth === 0) {
      out.push(cur);
      cur = '';
    } else cur += ch;
  }
  return [...out, cur];
}

export function parseSelector(text: string, flag = '--rank'): Term[] {
  return split(text.replace(/ /g, '')).map((raw) => {
    const m = TERM.exec(raw);
    if (!m) throw new SelectorError(`${flag} ${pyRepr(text)}: ${pyRepr(raw)} is not DIM=N, DIM=*, DIM=A:B or DIM=(A,B,...)`);
    const v = m[2];
    let values: number[] | undefined;
    if (v === '*') values = undefined;
    else if (v.includes(':')) {
      const [a, b] = v.split(':').map(Number);
      values = Array.from({ length: Math.max(0, b - a) }, (_, i) => a + i);
    } else if (v.startsWith('(')) values = v.slice(1, -1).split(',').map(Number);
    else values = [Number(v)];
    return { dim: m[1], values, text: raw };
  });
}

/** Every term names a known dimension and coordinates inside it (selector.check). */
export function checkSelector(terms: Term[], sizes: Map<string, number>, flag = '--rank'): void {
  for (const t of terms) {
    const size = sizes.get(t.dim);
    if (size === undefined)
      throw new SelectorError(`${flag} ${t.text}: unknown mesh dimension ${pyRepr(t.dim)}; the dimensions are ${dimsText(sizes)}`);
    const bad = (t.values ?? []).find((v) => v >= size);
    if (bad !== undefined) throw new SelectorError(`${flag} ${t.text}: ${t.dim}=${bad} is out of range; ${t.dim} is 0-${size - 1}`);
  }
}

const matches = (terms: Term[], coords: Map<string, number>) =>
  terms.every((t) => coords.has(t.dim) && (t.values === undefined || t.values.includes(coords.get(t.dim)!)));

/** The ranks a mesh selector chooses among `ranks` (selector.resolve), sorted; throws SelectorError. */
export function resolveSelector(text: string, ranks: HasMeshes[], flag = '--rank'): number[] {
  const terms = parseSelector(text, flag);
  checkSelector(terms, dimsOf(ranks), flag);
  return ranks
    .filter((r) => matches(terms, coordsOf(r)))
    .map((r) => r.rank)
    .sort((a, b) => a - b);
}

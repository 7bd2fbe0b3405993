/**
 * Each rank's DeviceMeshes (its entry's `meshes`: root and flattened meshes the job made; issue 31), for the
 * Ranks view's groups and coordinates. (Choosing ranks by coordinates is the CLI's: `rtdebug check --rank`.)
 * An entry may come from a store anyone on that network could write: meshes are read as the harness reads
 * them (names `[A-Za-z_][A-Za-z0-9_]*`, integers, coord < shape, at most 8 dims), at most 16 per rank;
 * anything else is not a mesh. Pure.
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

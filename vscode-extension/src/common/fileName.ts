/**
 * The file name of a path as a rank reported it (`/abs/train.py` → `train.py`), for rows that say
 * `file:line`. Either separator: the rank may run on another OS than this window. A leaf module: every
 * view's words use it, so it imports nothing.
 */
export const basename = (p: string): string => p.split(/[\\/]/).pop() || p;

import * as fs from 'fs';

/**
 * One registry entry file read the way the harness reads it (harness/rtdebug/registry/entry.py
 * `read_bounded`), with its words. Every file under the registry may have been put there by something other
 * than the harness, and the Ranks view reads them every second on the extension host's one thread: a FIFO
 * named `session.json` would block a plain read forever (no writer ever comes), a symlink could point the
 * read anywhere, and a huge file would be read whole. So the file is opened without following a link and
 * without blocking (O_NOFOLLOW | O_NONBLOCK: a FIFO opens at once, then fstat says what it is), only a
 * regular file is read, and at most MAX_ENTRY bytes of it.
 */

/** Bytes: a rank or session entry is a few KB (record.py MAX_ENTRY). */
export const MAX_ENTRY = 1 << 20;

/** Why an entry file cannot be used, as `<path>: <why>` (one warning line, never thrown past the reader). */
export class UnreadableEntry extends Error {}

const FLAGS = fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK;

/** The text of the regular file at `file`; undefined when there is none (not written yet, or just removed). */
export function readEntry(file: string, limit = MAX_ENTRY): string | undefined {
  let fd: number;
  try {
    fd = fs.openSync(file, FLAGS);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return undefined;
    // O_NOFOLLOW on a symlink fails with ELOOP (Linux; EMLINK on some BSDs)
    throw new UnreadableEntry(`${file}: ${code === 'ELOOP' || code === 'EMLINK' ? 'a symbolic link' : (code ?? 'cannot open')}`);
  }
  try {
    const st = fs.fstatSync(fd);
    if (!st.isFile()) throw new UnreadableEntry(`${file}: not a regular file`);
    if (st.size > limit) throw new UnreadableEntry(`${file}: ${st.size} bytes, more than an entry ever is (${limit})`);
    return readAtMost(fd, file, Math.min(st.size, limit) + 1, limit).toString('utf8');
  } catch (e) {
    if (e instanceof UnreadableEntry) throw e;
    throw new UnreadableEntry(`${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  } finally {
    fs.closeSync(fd);
  }
}

/** Reads to the end, `limit` bytes at most (the size fstat gave is where it starts; a file may still grow). */
function readAtMost(fd: number, file: string, initial: number, limit: number): Buffer {
  let buf = Buffer.alloc(initial);
  let n = 0;
  for (;;) {
    const got = fs.readSync(fd, buf, n, buf.length - n, null);
    if (got === 0) return buf.subarray(0, n);
    n += got;
    if (n > limit) throw new UnreadableEntry(`${file}: more than ${limit} bytes`);
    if (n === buf.length) {
      const bigger = Buffer.alloc(Math.min(buf.length * 2, limit + 1));
      buf.copy(bigger, 0, 0, n);
      buf = bigger;
    }
  }
}

/** Reading JSON-lines files in tests and tools, with file:line in every error. */
import { createReadStream } from 'node:fs';
import { createInterface } from 'node:readline';
import { InputRejectedError } from '../errors.ts';

/** Parses one JSON value per non-blank line; throws InputRejectedError naming `file:line` on the first bad line. */
export async function readJsonLines(file: string): Promise<unknown[]> {
  const input = createReadStream(file, { encoding: 'utf8' });
  // Surface open errors (ENOENT, EISDIR) with the path instead of a bare errno.
  const opened = new Promise<void>((resolve, reject) => {
    input.once('ready', () => resolve());
    input.once('error', (err) => reject(new Error(`${file}: cannot read: ${err.message}`, { cause: err })));
  });
  await opened;
  const lines = createInterface({ input, crlfDelay: Infinity });
  const values: unknown[] = [];
  let lineNo = 0;
  try {
    for await (const raw of lines) {
      lineNo++;
      const text = lineNo === 1 ? raw.replace(/^\uFEFF/, '') : raw;
      if (text.trim() === '') continue;
      try {
        values.push(JSON.parse(text));
      } catch (err) {
        const snippet = text.length > 80 ? `${text.slice(0, 80)}...` : text;
        throw new InputRejectedError(`${file}:${lineNo}`, 'one JSON value per line', `${snippet} (${(err as Error).message})`);
      }
    }
  } catch (err) {
    if (err instanceof InputRejectedError) throw err;
    throw new Error(`${file}:${lineNo + 1}: cannot read: ${(err as Error).message}`, { cause: err });
  } finally {
    lines.close();
    input.destroy();
  }
  return values;
}

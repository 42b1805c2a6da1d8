/** Command-line flags of the bench tools. */

/** An integer flag's value, at least `min`; anything else is an error naming the flag, what was expected and what was given. */
export function intOption(flag: string, raw: string | undefined, min: number): number {
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || n < min) throw new Error(`--${flag}: expected an integer >= ${min}, received "${raw}"`);
  return n;
}

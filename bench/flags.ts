/** Command-line flags of the bench tools. */

/** An integer flag's value, at least `min`; anything else is an error naming the flag, what was expected and what was given. */
export function intOption(flag: string, raw: string | undefined, min: number): number {
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || n < min) throw new Error(`--${flag}: expected an integer >= ${min}, received "${raw}"`);
  return n;
}

/** `--checkpoint-interval`: milliseconds (an integer >= 1), or "off" (undefined); `fallback` when the flag is not given. */
export function checkpointIntervalOption(raw: string | undefined, fallback: number | undefined): number | undefined {
  if (raw === undefined) return fallback;
  if (raw === 'off') return undefined;
  const n = Number(raw.replace(/_/g, ''));
  if (!/^[1-9][0-9_]*$/.test(raw) || !Number.isSafeInteger(n)) throw new Error(`--checkpoint-interval: expected milliseconds (an integer >= 1) or "off", received "${raw}"`);
  return n;
}

/** Validation of CLI flags with zod, reported as "--flag: expected X, received Y". */
import type { z } from 'zod';
import { ConfigError } from '../errors.ts';

export interface FlagInfo {
  readonly flag: string;
  readonly expected: string;
}

export function validateFlags<S extends z.ZodType>(schema: S, raw: Record<string, unknown>, flags: Record<string, FlagInfo>): z.infer<S> {
  const result = schema.safeParse(raw);
  if (result.success) return result.data;
  const issue = result.error.issues[0]!;
  const field = String(issue.path[0] ?? '');
  const info = flags[field];
  const received = raw[field];
  throw new ConfigError(info?.flag ?? field, info?.expected ?? issue.message, received === undefined ? 'nothing' : JSON.stringify(received));
}

export const fmt = {
  int: (n: number) => Math.round(n).toLocaleString('en-US'),
  mb: (bytes: number) => `${(bytes / 1024 / 1024).toFixed(0)} MB`,
  secs: (ms: number) => `${(ms / 1000).toFixed(2)} s`,
  /** Event time as UTC hh:mm:ss(.mmm). */
  clock: (t: number, ms = false) => new Date(t).toISOString().slice(11, ms ? 23 : 19),
  /** Human-sized duration: 850 ms, 4.2 s, 3 min, 5 h, 12 d, 9.8 y. */
  span(ms: number): string {
    const a = Math.abs(ms);
    const sign = ms < 0 ? '-' : '';
    if (a < 1000) return `${sign}${Math.round(a)} ms`;
    if (a < 60_000) return `${sign}${(a / 1000).toFixed(1)} s`;
    if (a < 3_600_000) return `${sign}${Math.round(a / 60_000)} min`;
    if (a < 86_400_000) return `${sign}${Math.round(a / 3_600_000)} h`;
    if (a < 365 * 86_400_000) return `${sign}${Math.round(a / 86_400_000)} d`;
    return `${sign}${(a / (365.25 * 86_400_000)).toFixed(1)} y`;
  },
};

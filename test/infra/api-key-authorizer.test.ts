/** The API-key authorizer (infra/functions/api-key-authorizer.ts): digests only, constant-time compare. */
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { isAuthorized, parseDigests } from '../../infra/functions/api-key-authorizer.ts';

const sha = (s: string) => createHash('sha256').update(s).digest('hex');

describe('API-key authorizer', () => {
  const digests = parseDigests(`${sha('old-key')}, ${sha('new-key').toUpperCase()},not-hex,`);

  it('accepts any of the configured keys (rotation keeps two)', () => {
    expect(digests).toHaveLength(2);
    expect(isAuthorized('old-key', digests)).toBe(true);
    expect(isAuthorized('new-key', digests)).toBe(true);
  });

  it('refuses other, empty or missing keys, and everything when no digest is configured', () => {
    expect(isAuthorized('new-key ', digests)).toBe(false);
    expect(isAuthorized('', digests)).toBe(false);
    expect(isAuthorized(undefined, digests)).toBe(false);
    expect(isAuthorized('old-key', parseDigests(undefined))).toBe(false);
  });
});

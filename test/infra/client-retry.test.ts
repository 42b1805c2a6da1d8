/**
 * The Lambda entries (functions/*.ts) build every AWS client with the SDK's adaptive
 * retry mode: throttled calls are retried with client-side rate limiting before a
 * failure reaches the handler (whose own backoff then takes over, lib/aws/group-backoff.ts).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const dir = join(import.meta.dirname, '../../functions');

describe('functions/*.ts SDK clients', () => {
  it('use retryMode adaptive, every one of them', () => {
    let clients = 0;
    for (const file of readdirSync(dir).filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'))) {
      const source = readFileSync(join(dir, file), 'utf8');
      for (const m of source.matchAll(/new (\w+Client)\(([^)]*)\)/g)) {
        clients++;
        expect(m[2], `${file}: new ${m[1]}(${m[2]})`).toMatch(/retryMode: 'adaptive'/);
      }
    }
    expect(clients).toBeGreaterThanOrEqual(9);
  });
});

/**
 * The Lambda entries (functions/*.ts) build every AWS client from handlerClientConfig()
 * (lib/aws/clients.ts): the SDK's adaptive retry mode (throttled calls are retried with
 * client-side rate limiting before a failure reaches the handler, whose own backoff then
 * takes over, lib/aws/operator/group-backoff.ts) and the connection and request timeouts the
 * construct sets in the function's environment.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { handlerClientConfig } from '../../lib/aws/clients.ts';

const dir = join(import.meta.dirname, '../../functions');

describe('functions/*.ts SDK clients', () => {
  it('are built from handlerClientConfig(), every one of them', () => {
    let clients = 0;
    for (const file of readdirSync(dir).filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'))) {
      const source = readFileSync(join(dir, file), 'utf8');
      for (const m of source.matchAll(/new (\w+Client)\((.*)\)/g)) {
        clients++;
        expect(m[2], `${file}: new ${m[1]}(${m[2]})`).toBe('handlerClientConfig()');
      }
    }
    expect(clients).toBeGreaterThanOrEqual(9);
  });

  it('which retries adaptively with a request handler of its own per client', () => {
    const a = handlerClientConfig({ connectionTimeoutMs: 100, requestTimeoutMs: 200 });
    const b = handlerClientConfig({ connectionTimeoutMs: 100, requestTimeoutMs: 200 });
    expect(a.retryMode).toBe('adaptive');
    expect(a.requestHandler).not.toBe(b.requestHandler);
  });
});

import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { publishFile, retryDelay } from '../../lib/cli/publish.ts';
import { BackPressureError, ConfigError, InputRejectedError } from '../../lib/errors.ts';
import { startIngestServer, type IngestServer } from '../../lib/local/ingest-server.ts';
import type { IngestTarget } from '../../lib/local/ingest-target.ts';

/** Records offered batches; refuses the next `saturateNext` offers; rejects events without a numeric `id`. */
class FakeTarget implements IngestTarget {
  offered: unknown[][] = [];
  saturateNext = 0;
  refusals = 0;
  streams() {
    return ['orders'];
  }
  validate(_stream: string, event: unknown) {
    const id = (event as { id?: unknown } | null)?.id;
    return typeof id === 'number' ? undefined : `id: expected a number, received ${JSON.stringify(id) ?? 'undefined'}`;
  }
  offer(_stream: string, events: readonly unknown[]) {
    if (this.saturateNext > 0) {
      this.saturateNext--;
      this.refusals++;
      return { ok: false as const, retryAfterMs: 20 };
    }
    this.offered.push([...events]);
    return { ok: true as const };
  }
}

const target = new FakeTarget();
let server: IngestServer;
let small: IngestServer; // tighter limits than the publisher's batches
let dir: string;

beforeAll(async () => {
  server = await startIngestServer(target, { port: 0 });
  small = await startIngestServer(target, { port: 0, maxEventsPerRequest: 4 });
  dir = await mkdtemp(join(tmpdir(), 'sluice-publish-'));
});
afterAll(async () => {
  await server.close();
  await small.close();
  await rm(dir, { recursive: true, force: true });
});
beforeEach(() => {
  target.offered = [];
  target.saturateNext = 0;
  target.refusals = 0;
});

let fileCount = 0;
async function jsonl(lines: string[]): Promise<string> {
  const file = join(dir, `events-${fileCount++}.jsonl`);
  await writeFile(file, lines.join('\n') + '\n');
  return file;
}

describe('publishFile', () => {
  it('posts the file in batches of batchSize, in file order', async () => {
    const events = Array.from({ length: 12 }, (_, i) => ({ id: i, v: `e${i}` }));
    const file = await jsonl(events.map((e) => JSON.stringify(e)));
    const result = await publishFile({ url: server.url, stream: 'orders', file, batchSize: 5 });
    expect(result).toEqual({ sent: 12, accepted: 12, rejected: [], replayed: [], shed: [] });
    expect(target.offered.map((b) => b.length)).toEqual([5, 5, 2]);
    expect(target.offered.flat()).toEqual(events);
  });

  it('maps rejected indexes back to file line numbers (blank and malformed lines included)', async () => {
    const file = await jsonl([
      '{"id":1}', //  1
      '', //          2  blank: skipped, takes no index
      '{"x":2}', //   3  rejected by the server
      '{"id":3}', //  4
      '{"id":4', //   5  malformed: rejected locally, not sent
      '{"id":5}', //  6
      '{"id":"6"}', // 7  rejected by the server
      '{"y":7}', //   8  rejected
      '{"z":8}', //   9  rejected: lines 9-11 form a batch with no valid event (HTTP 400)
      '{"q":9}', //  10  rejected
      '{"r":0}', //  11  rejected
      '{"id":10}', // 12
    ]);
    const result = await publishFile({ url: `${server.url}/`, stream: 'orders', file, batchSize: 3 });
    expect(result.sent).toBe(10);
    expect(result.accepted).toBe(4);
    expect(result.rejected.map((r) => r.line)).toEqual([3, 5, 7, 8, 9, 10, 11]);
    expect(target.offered.map((b) => b.length)).toEqual([2, 1, 1]);
    expect(result.rejected[0]!.error).toBe('id: expected a number, received undefined');
    expect(result.rejected[1]!.error).toMatch(/^malformed JSON: /);
    expect(result.rejected[2]!.error).toBe('id: expected a number, received "6"');
    expect(target.offered.flat()).toEqual([{ id: 1 }, { id: 3 }, { id: 5 }, { id: 10 }]);
  });

  it('retries after 429 using Retry-After, without duplicating events', async () => {
    target.saturateNext = 2;
    const file = await jsonl(['{"id":1}', '{"id":2}', '{"id":3}']);
    const result = await publishFile({ url: server.url, stream: 'orders', file, batchSize: 2, retries: 3 });
    expect(result).toEqual({ sent: 3, accepted: 3, rejected: [], replayed: [], shed: [] });
    expect(target.refusals).toBe(2);
    expect(target.offered).toEqual([[{ id: 1 }, { id: 2 }], [{ id: 3 }]]);
  });

  it('waits at least Retry-After: the header when the body asks for less, the body when it asks for more', () => {
    const reply = (header: string | undefined, bodyMs?: number) => ({
      status: 429,
      headers: new Headers(header === undefined ? {} : { 'retry-after': header }),
      body: bodyMs === undefined ? {} : { retryAfterMs: bodyMs },
    });
    expect(retryDelay(reply('2', 300), 0, 500)).toBe(2000);
    expect(retryDelay(reply('1', 2500), 0, 500)).toBe(2500);
    expect(retryDelay(reply('3'), 4, 500)).toBe(3000);
    expect(retryDelay(reply(undefined, 700), 0, 500)).toBe(700);
  });

  it('gives up after `retries` 429s with a BackPressureError naming the lines not sent', async () => {
    target.saturateNext = 100;
    const file = await jsonl(['{"id":1}', '{"id":2}', '{"id":3}']);
    const publishing = publishFile({ url: server.url, stream: 'orders', file, batchSize: 2, retries: 2 });
    await expect(publishing).rejects.toThrow(BackPressureError);
    await expect(publishing).rejects.toThrow(/still saturated after 2 retries; lines 1-2 were not enqueued \(0 events/);
    expect(target.refusals).toBe(3);
    expect(target.offered).toEqual([]);
  });

  it('splits a batch the server finds too large (413) and keeps order', async () => {
    const events = Array.from({ length: 10 }, (_, i) => ({ id: i }));
    const file = await jsonl(events.map((e) => JSON.stringify(e)));
    const result = await publishFile({ url: small.url, stream: 'orders', file, batchSize: 10, progress: true });
    expect(result).toEqual({ sent: 10, accepted: 10, rejected: [], replayed: [], shed: [] });
    expect(target.offered.every((b) => b.length <= 4)).toBe(true);
    expect(target.offered.flat()).toEqual(events);
  });

  it('fails clearly on an unknown stream, a missing file, and bad options', async () => {
    const file = await jsonl(['{"id":1}']);
    await expect(publishFile({ url: server.url, stream: 'nope', file })).rejects.toThrow(InputRejectedError);
    await expect(publishFile({ url: server.url, stream: 'nope', file })).rejects.toThrow(
      'stream: expected one of "orders", received "nope"',
    );
    await expect(publishFile({ url: server.url, stream: 'orders', file: join(dir, 'missing.jsonl') })).rejects.toThrow(
      /publish file: expected a readable JSON-lines file, received ".*missing\.jsonl" \(ENOENT\)/,
    );
    await expect(publishFile({ url: server.url, stream: 'orders', file, batchSize: 0 })).rejects.toThrow(ConfigError);
    await expect(publishFile({ url: 'localhost:8787', stream: 'orders', file })).rejects.toThrow(
      'publish url: expected an http(s) URL such as http://127.0.0.1:8787, received "localhost:8787"',
    );
    expect(target.offered).toEqual([]);
  });
});

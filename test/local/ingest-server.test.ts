import { connect } from 'node:net';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ConfigError } from '../../lib/errors.ts';
import { startIngestServer, type IngestServer } from '../../lib/local/ingest-server.ts';
import type { IngestTarget } from '../../lib/local/ingest-target.ts';
import { MAX_EVENT_DEPTH } from '../../lib/transport/ingest-validation.ts';

/** Records what was offered; can report saturation; rejects events without a numeric `id`. */
class FakeTarget implements IngestTarget {
  offered: { stream: string; events: unknown[] }[] = [];
  saturatedMs: number | undefined;
  throwOnOffer = false;
  streams() {
    return ['orders', 'clicks'];
  }
  validate(_stream: string, event: unknown) {
    const id = (event as { id?: unknown } | null)?.id;
    return typeof id === 'number' ? undefined : `id: expected a number, received ${JSON.stringify(id) ?? 'undefined'}`;
  }
  offer(stream: string, events: readonly unknown[]) {
    if (this.throwOnOffer) throw new Error('disk full');
    if (this.saturatedMs !== undefined) return { ok: false as const, retryAfterMs: this.saturatedMs };
    this.offered.push({ stream, events: [...events] });
    return { ok: true as const };
  }
}

const MAX_BODY = 4096;
const MAX_EVENTS = 50;
const target = new FakeTarget();
let server: IngestServer;

beforeAll(async () => {
  server = await startIngestServer(target, { port: 0, maxBodyBytes: MAX_BODY, maxEventsPerRequest: MAX_EVENTS });
});
afterAll(() => server.close());
beforeEach(() => {
  target.offered = [];
  target.saturatedMs = undefined;
  target.throwOnOffer = false;
});

async function post(stream: string, body: string | Uint8Array, contentType?: string) {
  const res = await fetch(`${server.url}/streams/${stream}/events`, {
    method: 'POST',
    headers: contentType ? { 'content-type': contentType } : {},
    body,
  });
  return { status: res.status, headers: res.headers, body: (await res.json()) as Record<string, any> };
}
const postJson = (stream: string, value: unknown) => post(stream, JSON.stringify(value), 'application/json');

describe('ingest server', () => {
  it('listens on a loopback port picked by the OS and answers GET /healthz', async () => {
    expect(server.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(server.port).toBeGreaterThan(0);
    const res = await fetch(`${server.url}/healthz`);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ status: 'ok', streams: ['orders', 'clicks'] });
  });

  it('202: accepts a valid JSON array and offers it in order', async () => {
    const events = [{ id: 1 }, { id: 2, v: 'x' }, { id: 3 }];
    const res = await postJson('orders', events);
    expect(res.status).toBe(202);
    expect(res.body).toMatchObject({ accepted: 3, rejected: [] });
    expect(res.body.message).toMatch(/accepted 3 events/);
    expect(target.offered).toEqual([{ stream: 'orders', events }]);
  });

  it('202: partially valid array names the exact rejected indexes and offers only valid events, in order', async () => {
    const res = await postJson('orders', [{ id: 1 }, { name: 'no id' }, { id: 2 }, { id: '3' }, { id: 4 }]);
    expect(res.status).toBe(202);
    expect(res.body.accepted).toBe(3);
    expect(res.body.rejected).toEqual([
      { index: 1, error: 'id: expected a number, received undefined' },
      { index: 3, error: 'id: expected a number, received "3"' },
    ]);
    expect(target.offered).toEqual([{ stream: 'orders', events: [{ id: 1 }, { id: 2 }, { id: 4 }] }]);
  });

  it('202: accepts JSON lines (x-ndjson with charset, and jsonl); blank lines take no index', async () => {
    const res = await post('clicks', '{"id":1}\r\n\n{"bad":true}\n{"id":2}\n', 'application/x-ndjson; charset=utf-8');
    expect(res.status).toBe(202);
    expect(res.body).toMatchObject({ accepted: 2, rejected: [{ index: 1 }] });
    const res2 = await post('clicks', '{"id":3}', 'application/jsonl');
    expect(res2.status).toBe(202);
    expect(target.offered).toEqual([
      { stream: 'clicks', events: [{ id: 1 }, { id: 2 }] },
      { stream: 'clicks', events: [{ id: 3 }] },
    ]);
  });

  it('400: malformed JSON line 3 is named and nothing is enqueued', async () => {
    const res = await post('orders', '{"id":1}\n{"id":2}\n{"id":3,,}\n{"id":4}\n', 'application/x-ndjson');
    expect(res.status).toBe(400);
    expect(res.body.line).toBe(3);
    expect(res.body.message).toMatch(/^malformed JSON on line 3, column 9: Expected double-quoted property name$/);
    expect(target.offered).toEqual([]);
  });

  it('400: malformed JSON array gives the position', async () => {
    const res = await post('orders', '[{"id":1},\n {"id":2,}]', 'application/json');
    expect(res.status).toBe(400);
    expect(res.body.position).toBe(20);
    expect(res.body.message).toMatch(/position 20 \(line 2, column 10\)/);
    expect(target.offered).toEqual([]);
  });

  it('400: empty array, non-array, empty body, and blank JSON lines', async () => {
    const cases = [
      await postJson('orders', []),
      await postJson('orders', { id: 1 }),
      await post('orders', '', 'application/json'),
      await post('orders', '\n  \n', 'application/x-ndjson'),
    ];
    expect(cases.map((c) => c.status)).toEqual([400, 400, 400, 400]);
    expect(cases[0]!.body.message).toMatch(/non-empty JSON array/);
    expect(cases[1]!.body.message).toMatch(/expected a JSON array of events, received object/);
    expect(cases[2]!.body.message).toMatch(/body is empty/);
    expect(cases[3]!.body.message).toMatch(/no events/);
    expect(target.offered).toEqual([]);
  });

  it('400: when every event is invalid, lists them all with accepted 0 and enqueues nothing', async () => {
    const res = await postJson('orders', [{ x: 1 }, null]);
    expect(res.status).toBe(400);
    expect(res.body.accepted).toBe(0);
    expect(res.body.rejected.map((r: { index: number }) => r.index)).toEqual([0, 1]);
    expect(res.body.message).toMatch(/all 2 events were rejected/);
    expect(target.offered).toEqual([]);
  });

  it('404: unknown stream lists the known ones; unknown route lists the routes', async () => {
    const res = await postJson('nope', [{ id: 1 }]);
    expect(res.status).toBe(404);
    expect(res.body.message).toBe('unknown stream "nope"; known streams: "orders", "clicks"');
    expect(res.body.knownStreams).toEqual(['orders', 'clicks']);
    const other = await fetch(`${server.url}/elsewhere`);
    expect(other.status).toBe(404);
    expect(((await other.json()) as { message: string }).message).toMatch(/POST \/streams\/:name\/events/);
    expect(target.offered).toEqual([]);
  });

  it('405: wrong method comes with an Allow header', async () => {
    const res = await fetch(`${server.url}/streams/orders/events`);
    expect(res.status).toBe(405);
    expect(res.headers.get('allow')).toBe('POST');
    expect(((await res.json()) as { message: string }).message).toMatch(/GET not allowed.*use POST/);
    const health = await fetch(`${server.url}/healthz`, { method: 'DELETE' });
    expect(health.status).toBe(405);
    expect(health.headers.get('allow')).toBe('GET, HEAD');
  });

  it('413: oversize body (declared or chunked) and too many events; nothing enqueued', async () => {
    const big = JSON.stringify(Array.from({ length: 40 }, (_, i) => ({ id: i, pad: 'x'.repeat(200) })));
    expect(big.length).toBeGreaterThan(MAX_BODY);
    const declared = await post('orders', big, 'application/json');
    expect(declared.status).toBe(413);
    expect(declared.body.message).toMatch(/exceeds the limit of 4096 bytes/);

    // No content-length: the server must count while reading and stop.
    const bytes = new TextEncoder().encode(big.repeat(100));
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        for (let i = 0; i < bytes.length; i += 1024) controller.enqueue(bytes.slice(i, i + 1024));
        controller.close();
      },
    });
    const chunked = await fetch(`${server.url}/streams/orders/events`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: stream,
      duplex: 'half',
    } as RequestInit);
    expect(chunked.status).toBe(413);

    const many = await postJson('orders', Array.from({ length: MAX_EVENTS + 1 }, (_, i) => ({ id: i })));
    expect(many.status).toBe(413);
    expect(many.body.message).toMatch(/51 events exceed the limit of 50/);
    const manyLines = await post('orders', '{"id":1}\n'.repeat(MAX_EVENTS + 1), 'application/x-ndjson');
    expect(manyLines.status).toBe(413);
    expect(target.offered).toEqual([]);
  });

  it('413 reaches a client that sends its whole body before reading: the rest is drained, then the connection ends cleanly', async () => {
    // Many clients write the request out, then read; a close with their upload unread resets the connection under them.
    const body = Buffer.alloc(8 * 1024 * 1024, 0x20);
    for (const framing of ['content-length', 'chunked'] as const) {
      const answer = await new Promise<string>((resolve, reject) => {
        const url = new URL(server.url);
        const sock = connect(Number(url.port), url.hostname);
        let got = '';
        sock.on('error', reject);
        sock.on('connect', () => {
          const head = `POST /streams/orders/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${framing === 'chunked' ? 'Transfer-Encoding: chunked' : `Content-Length: ${body.length}`}\r\n\r\n`;
          const payload = framing === 'chunked' ? Buffer.concat([Buffer.from(head + body.length.toString(16) + '\r\n'), body, Buffer.from('\r\n0\r\n\r\n')]) : Buffer.concat([Buffer.from(head), body]);
          sock.write(payload, (err) => {
            if (err) return reject(err);
            sock.on('data', (d) => (got += d.toString()));
            sock.on('end', () => resolve(got));
          });
        });
      });
      expect(answer).toMatch(/^HTTP\/1\.1 413 /);
      expect(JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4))).toMatchObject({ error: 'payload_too_large' });
    }
    // The server is fine afterwards.
    expect((await postJson('orders', [{ id: 1 }])).status).toBe(202);
    expect(target.offered).toEqual([{ stream: 'orders', events: [{ id: 1 }] }]);
  });

  it('415: a compressed body (Content-Encoding gzip) names the encoding; identity is fine', async () => {
    const gz = await fetch(`${server.url}/streams/orders/events`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' },
      body: gzipSync(JSON.stringify([{ id: 1 }])),
    });
    expect(gz.status).toBe(415);
    expect(await gz.json()).toMatchObject({ error: 'unsupported_content_encoding', message: 'unsupported content-encoding "gzip"; send the body uncompressed (identity)' });
    const identity = await fetch(`${server.url}/streams/orders/events`, { method: 'POST', headers: { 'content-type': 'application/json', 'content-encoding': 'identity' }, body: '[{"id":2}]' });
    expect(identity.status).toBe(202);
    expect(target.offered).toEqual([{ stream: 'orders', events: [{ id: 2 }] }]);
  });

  it('400: an event nested deeper than MAX_EVENT_DEPTH is rejected naming the limit, before the target sees it', async () => {
    const nest = (levels: number): unknown => (levels === 0 ? 0 : { a: nest(levels - 1) });
    // id sits on the outermost object, so depth is the only thing wrong.
    const ok = { id: 1, n: nest(MAX_EVENT_DEPTH - 1) };
    const deep = { id: 2, n: nest(MAX_EVENT_DEPTH) };
    const mixed = await postJson('orders', [ok, deep]);
    expect(mixed.status).toBe(202);
    expect(mixed.body.rejected).toEqual([{ index: 1, error: `(event): expected at most ${MAX_EVENT_DEPTH} levels of nested arrays and objects, received more than ${MAX_EVENT_DEPTH}` }]);
    // Very deep (what overflowed the stack elsewhere): still a 400, as text too small for the body limit.
    const text = '[' + '['.repeat(2000) + ']'.repeat(2000) + ']';
    expect(text.length).toBeLessThan(MAX_BODY);
    const huge = await post('orders', text, 'application/json');
    expect(huge.status).toBe(400);
    expect(huge.body.rejected[0].error).toMatch(/at most 64 levels/);
    expect(target.offered).toEqual([{ stream: 'orders', events: [ok] }]);
  });

  it('415: missing or wrong content type says which are accepted', async () => {
    const missing = await post('orders', new TextEncoder().encode('[{"id":1}]'));
    expect(missing.status).toBe(415);
    expect(missing.body.message).toBe(
      'unsupported content-type (missing); accepted: application/json, application/x-ndjson, application/jsonl',
    );
    const text = await post('orders', '[{"id":1}]', 'text/plain');
    expect(text.status).toBe(415);
    expect(text.body.message).toMatch(/"text\/plain"/);
    const latin1 = await post('orders', '[{"id":1}]', 'application/json; charset=iso-8859-1');
    expect(latin1.status).toBe(415);
    expect(latin1.body.message).toMatch(/charset "iso-8859-1".*only utf-8/);
    expect(target.offered).toEqual([]);
  });

  it('429: saturation answers Retry-After (ceil seconds) and enqueues nothing', async () => {
    target.saturatedMs = 1500;
    const res = await postJson('orders', [{ id: 1 }, { id: 2 }]);
    expect(res.status).toBe(429);
    expect(res.headers.get('retry-after')).toBe('2');
    expect(res.body).toMatchObject({ error: 'saturated', retryAfterMs: 1500 });
    expect(res.body.message).toMatch(/nothing was enqueued/);
    expect(target.offered).toEqual([]);
  });

  it('500: a throwing target is never answered 2xx', async () => {
    target.throwOnOffer = true;
    const res = await postJson('orders', [{ id: 1 }]);
    expect(res.status).toBe(500);
    expect(res.body.message).toMatch(/disk full/);
  });

  it('rejects invalid options with a ConfigError saying what was expected', async () => {
    await expect(startIngestServer(target, { port: -1 })).rejects.toThrow(ConfigError);
    await expect(startIngestServer(target, { port: -1 })).rejects.toThrow(
      'ingest server option "port": expected an integer from 0 to 65535 (0 = let the OS pick a free port), received -1 (number)',
    );
    await expect(startIngestServer(target, { maxBodyBytes: 'big' as unknown as number })).rejects.toThrow(/maxBodyBytes.*received "big" \(string\)/);
    await expect(startIngestServer(target, { prot: 1 } as never)).rejects.toThrow(/"prot": expected one of port, host/);
  });

  it('defaults to 127.0.0.1 and a free port; a taken port fails clearly', async () => {
    const other = await startIngestServer(target);
    try {
      expect(other.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
      await expect(startIngestServer(target, { port: other.port })).rejects.toThrow(/expected a free TCP port.*EADDRINUSE/);
    } finally {
      await other.close();
    }
  });
});

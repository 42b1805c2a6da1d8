/**
 * HTTP ingestion endpoint of the embedded runtime (node:http, no framework).
 *
 *   POST /streams/:name/events   body: JSON array, or JSON lines (one event per line)
 *   GET  /healthz
 *   GET  /stats                  what the `stats` option returns, when given (`sluice status`, the dashboard)
 *   GET  /                       the `page` option (the dashboard), when given
 *
 * Contract points 4-6: a 202 is sent only after the target accepted the valid
 * events atomically; any other status means nothing was enqueued; overload is
 * a 429 with Retry-After (the target's own limit, or the bounds set here: ingest-bounds.ts);
 * bodies are read with a hard byte cap. What it refuses is counted (stats()).
 *
 * Idempotency-Key (with a target that remembers keys: the embedded runtime, durably in
 * its input log): a key reused with another body or stream is a 409, nothing enqueued;
 * the same body again gets the first answer with `replay: true` and
 * `Idempotent-Replayed: true`, nothing enqueued. A request waits for one in flight with
 * its key. A request that enqueued nothing (4xx, 429) is not remembered.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { z } from 'zod';
import { ConfigError } from '../errors.ts';
import {
  acceptedAnswer,
  bodyLimitMessage,
  checkContentEncoding,
  checkContentType,
  checkStream,
  DEFAULT_MAX_BODY_BYTES,
  DEFAULT_MAX_EVENTS,
  healthAnswer,
  type IngestAnswer,
  isAnswer,
  locateJsonError,
  matchRoute,
  parseBody,
  saturatedAnswer,
  tooLargeAnswer,
  validateEvents,
} from '../transport/ingest-validation.ts';
import { bodyFingerprint, checkKey, decide, remembered } from '../transport/idempotency.ts';
import type { KeyedOffer } from './ingest-keys.ts';
import type { IngestTarget } from './ingest-target.ts';
import { type IngestRejections, overBounds, RejectionCounter } from './ingest-bounds.ts';

export type { IngestTarget } from './ingest-target.ts';

export interface IngestServerOptions {
  /** TCP port; 0 (default) lets the OS pick a free one. */
  port?: number;
  /** Interface to bind; default 127.0.0.1 (loopback only). */
  host?: string;
  /** Largest accepted request body in bytes; default 1 MiB. */
  maxBodyBytes?: number;
  /** Most events in one request; default 10,000. */
  maxEventsPerRequest?: number;
  /** 429 for a request that would take a stream's accepted-but-unprocessed records past this; default: no bound but the target's. */
  maxQueuedRecords?: number;
  /** 429 while a stream's oldest accepted-but-unprocessed event is this many ms old or older; default: no bound. */
  maxLagMs?: number;
  /** The body of GET /stats (the job's live numbers); without it, /stats is not a route. */
  stats?: () => object;
  /** The HTML served at GET / (the dashboard); without it, / is not a route. */
  page?: string;
}

export interface IngestServer {
  url: string;
  port: number;
  /** What the endpoint refused so far (400, 413, 415, 429), per event where the events are known. */
  rejections(): IngestRejections;
  close(): Promise<void>;
}

export type { RejectedEvent } from '../transport/ingest-validation.ts';

const OptionsSchema = z.strictObject({
  port: z.number().int().min(0).max(65535).default(0),
  host: z.string().min(1).default('127.0.0.1'),
  maxBodyBytes: z.number().int().positive().default(DEFAULT_MAX_BODY_BYTES),
  maxEventsPerRequest: z.number().int().positive().default(DEFAULT_MAX_EVENTS),
  maxQueuedRecords: z.number().int().positive().optional(),
  maxLagMs: z.number().int().positive().optional(),
});
type ResolvedOptions = z.infer<typeof OptionsSchema>;

// Written by hand so the ConfigError reads "expected X, received Y" in user terms.
const EXPECTED: Record<string, string> = {
  port: 'an integer from 0 to 65535 (0 = let the OS pick a free port)',
  host: 'a non-empty host name or IP address',
  maxBodyBytes: 'a positive integer number of bytes',
  maxEventsPerRequest: 'a positive integer',
  maxQueuedRecords: 'a positive integer number of records',
  maxLagMs: 'a positive integer number of milliseconds',
};

function parseOptions(options: unknown): ResolvedOptions {
  const result = OptionsSchema.safeParse(options ?? {});
  if (result.success) return result.data;
  const issue = result.error.issues[0]!;
  if (issue.code === 'unrecognized_keys') {
    throw new ConfigError(
      `ingest server option "${issue.keys.join('", "')}"`,
      `one of ${Object.keys(EXPECTED).join(', ')}`,
      'an unknown option',
    );
  }
  const field = String(issue.path[0] ?? '');
  if (!(field in EXPECTED)) throw new ConfigError('ingest server options', 'an object', describe(options));
  const received = (options as Record<string, unknown>)[field];
  throw new ConfigError(`ingest server option "${field}"`, EXPECTED[field]!, describe(received));
}

function describe(value: unknown): string {
  if (value === undefined) return 'undefined';
  try {
    return `${JSON.stringify(value)} (${Array.isArray(value) ? 'array' : value === null ? 'null' : typeof value})`;
  } catch {
    return typeof value;
  }
}

/** Start the endpoint; resolves once it is listening. */
export async function startIngestServer(target: IngestTarget, options: IngestServerOptions = {}): Promise<IngestServer> {
  const { stats, page, ...rest } = options ?? {};
  const opts = parseOptions(rest);
  const counter = new RejectionCounter();
  const inFlight = new Map<string, Promise<unknown>>();
  const server = createServer((req, res) => {
    const path = new URL(req.url ?? '/', 'http://localhost').pathname;
    const read = req.method === 'GET' || req.method === 'HEAD';
    if (stats && path === '/stats' && read) return send(res, 200, stats(), { 'Cache-Control': 'no-store' });
    if (page !== undefined && (path === '/' || path === '/index.html') && read) return sendPage(res, page);
    handle(target, opts, counter, inFlight, req, res).catch((err: unknown) => {
      // A throwing target means we cannot know the batch was enqueued: never 2xx.
      const message = err instanceof Error ? err.message : String(err);
      if (!res.headersSent) send(res, 500, { error: 'internal', message: `ingestion failed: ${message}` });
      else res.destroy();
    });
  });
  await new Promise<void>((resolve, reject) => {
    const onError = (err: NodeJS.ErrnoException) => {
      reject(new ConfigError('ingest server port', `a free TCP port on ${opts.host}`, `${opts.port} (${err.code ?? err.message})`));
    };
    server.once('error', onError);
    server.listen(opts.port, opts.host, () => {
      server.off('error', onError);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const hostInUrl = opts.host.includes(':') ? `[${opts.host}]` : opts.host;
  return {
    url: `http://${hostInUrl}:${port}`,
    port,
    rejections: () => counter.snapshot(),
    close: () =>
      new Promise<void>((resolve, reject) => {
        // In-flight requests finish (their events may already be enqueued); idle keep-alives go now.
        server.close((err) => (err ? reject(err) : resolve()));
        server.closeIdleConnections();
      }),
  };
}

async function handle(target: IngestTarget, opts: ResolvedOptions, counter: RejectionCounter, inFlight: Map<string, Promise<unknown>>, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const path = new URL(req.url ?? '/', 'http://localhost').pathname;
  const route = matchRoute(req.method ?? 'GET', path);
  if (route.kind === 'answer') return reply(res, route.answer);
  if (route.kind === 'health') return reply(res, healthAnswer(target.streams()));
  const stream = route.stream;
  const unknown = checkStream(stream, target.streams());
  if (unknown) return reply(res, unknown);
  // Refused before its events are known (unread, or unparsed): counted as a request.
  const unread = (a: IngestAnswer) => (counter.add(a.status), reply(res, a));
  const format = checkContentType(req.headers['content-type']);
  if (isAnswer(format)) return unread(format);
  const encoded = checkContentEncoding(req.headers['content-encoding']);
  if (encoded) return unread(encoded);
  const rawKey = req.headers['idempotency-key'];
  const key = Array.isArray(rawKey) ? rawKey.join(', ') : rawKey;
  const badKey = key === undefined ? undefined : checkKey(key);
  if (badKey) return unread(badKey);

  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > opts.maxBodyBytes) return (counter.add(413), tooLarge(res, bodyLimitMessage(opts.maxBodyBytes, declared)));
  const body = await readBody(req, opts.maxBodyBytes);
  if (body === undefined) return (counter.add(413), tooLarge(res, bodyLimitMessage(opts.maxBodyBytes)));

  const parsed = parseBody(body, format, opts.maxEventsPerRequest);
  if (isAnswer(parsed)) return parsed.status === 413 ? (counter.add(413), tooLarge(res, String(parsed.body.message))) : unread(parsed);
  if (key === undefined || !target.recall) return accept(target, opts, counter, stream, parsed.events, res);
  // One request per key at a time: a second waits for the first's outcome, then is decided against it.
  for (let busy = inFlight.get(key); busy; busy = inFlight.get(key)) await busy.catch(() => undefined);
  const fingerprint = bodyFingerprint(stream, body);
  const recalled = target.recall(key);
  const now = recalled.now;
  const decision = decide(key, recalled.remembered, fingerprint, now, { stream });
  if (decision.kind === 'replay') return reply(res, decision.answer);
  // (Only answered requests are remembered here: never a resend.)
  if (decision.kind === 'conflict' || decision.kind === 'unresolved') return (counter.add(409, parsed.events.length), reply(res, decision.answer));
  const run = accept(target, opts, counter, stream, parsed.events, res, { key, fingerprint, at: now });
  inFlight.set(key, run);
  try {
    await run;
  } finally {
    inFlight.delete(key);
  }
}

/** Validate, check the bounds, offer; the 202 once the target has the events (durably, for a logging one). */
async function accept(target: IngestTarget, opts: ResolvedOptions, counter: RejectionCounter, stream: string, events: readonly unknown[], res: ServerResponse, keyed?: Omit<KeyedOffer, 'answer'>): Promise<void> {
  const parsed = { events };
  const checked = validateEvents(parsed.events, (event) => target.validate(stream, event));
  if (isAnswer(checked)) return (counter.add(checked.status, parsed.events.length), reply(res, checked));

  // A request that would pass a bound is refused whole, its invalid events counted as such.
  const refuse = (a: IngestAnswer) => {
    counter.add(400, checked.rejected.length);
    counter.add(429, checked.valid.length);
    reply(res, a);
  };
  // Opt-in load shedding (below the 429 bounds): the events it drops are answered as shed, never enqueued.
  const valid = checked.valid.map((v) => v.event);
  const pressure = target.pressure?.(stream);
  const shedding = pressure && target.shed?.(stream, valid, pressure);
  const kept = shedding ? shedding.kept : valid;
  const shed = shedding ? shedding.shed.map((i) => ({ index: checked.valid[i].index, reason: shedding.reason })) : [];
  const over = overBounds(stream, kept.length, pressure, opts);
  if (over) return refuse(over);
  const answer = acceptedAnswer(kept.length, parsed.events.length, checked.rejected, shed);
  const offered = target.offer(stream, kept, keyed && { ...keyed, answer: remembered(answer) }, shedding && shed.length ? { reason: shedding.reason, count: shed.length } : undefined);
  if (!offered.ok) return refuse(saturatedAnswer(stream, offered.retryAfterMs));
  // Accepted means durable: the 202 waits until a logging target has the events on disk (a failure is a 500, never a 2xx).
  if ('durable' in offered && offered.durable) await offered.durable;
  counter.add(400, checked.rejected.length);
  reply(res, answer);
}

/**
 * Reads at most `limit` bytes; resolves undefined (and stops buffering) as soon
 * as the body is larger. Listeners rather than for-await, because leaving an
 * async iterator destroys the socket before the 413 can be sent.
 */
function readBody(req: IncomingMessage, limit: number): Promise<Buffer | undefined> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const finish = (settle: () => void) => {
      req.off('data', onData).off('end', onEnd).off('error', reject);
      settle();
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size <= limit) chunks.push(chunk);
      else finish(() => resolve(undefined));
    };
    const onEnd = () => finish(() => resolve(Buffer.concat(chunks, size)));
    req.on('data', onData).on('end', onEnd).on('error', reject);
  });
}

/**
 * Most bytes of an oversized upload read (and discarded) after its 413, so that a client
 * still sending can finish and read the answer: closing a socket with unread input resets
 * the connection, and the reset can destroy the 413 before the client reads it.
 */
export const DRAIN_LIMIT_BYTES = 64 * 1024 * 1024;

function tooLarge(res: ServerResponse, message: string): void {
  const a = tooLargeAnswer(message);
  const req = res.req;
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > DRAIN_LIMIT_BYTES) {
    // Not worth reading: answer and close at once.
    send(res, a.status, a.body, { Connection: 'close' });
    req.resume();
    return;
  }
  // Answered now (a client reading as it sends stops early); the rest is discarded, never
  // buffered, and the connection closes once the upload is over, or above the drain limit.
  send(res, a.status, a.body);
  let drained = 0;
  req.on('data', (chunk: Buffer) => {
    drained += chunk.length;
    if (drained > DRAIN_LIMIT_BYTES) req.socket.destroy();
  });
  req.once('end', () => req.socket.end());
  req.resume();
}

function reply(res: ServerResponse, a: IngestAnswer): void {
  send(res, a.status, a.body, a.headers ? { ...a.headers } : {});
}

function send(res: ServerResponse, status: number, body: object, headers: Record<string, string> = {}): void {
  const payload = JSON.stringify(body);
  res.writeHead(status, {
    'Content-Type': 'application/json; charset=utf-8',
    'Content-Length': Buffer.byteLength(payload),
    ...headers,
  });
  res.end(res.req.method === 'HEAD' ? undefined : payload);
}

function sendPage(res: ServerResponse, html: string): void {
  res.writeHead(200, {
    'Content-Type': 'text/html; charset=utf-8',
    'Content-Length': Buffer.byteLength(html),
    'Cache-Control': 'no-store',
    // The page's own inline script and style, and fetches of this origin only.
    'Content-Security-Policy': "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:",
  });
  res.end(res.req.method === 'HEAD' ? undefined : html);
}

export { locateJsonError };

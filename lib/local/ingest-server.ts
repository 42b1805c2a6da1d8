/**
 * HTTP ingestion endpoint of the embedded runtime (node:http, no framework).
 *
 *   POST /streams/:name/events   body: JSON array, or JSON lines (one event per line)
 *   GET  /healthz
 *
 * Contract points 4-6: a 202 is sent only after the target accepted the valid
 * events atomically; any other status means nothing was enqueued; overload is
 * a 429 with Retry-After; bodies are read with a hard byte cap.
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
import type { IngestTarget } from './ingest-target.ts';

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
}

export interface IngestServer {
  url: string;
  port: number;
  close(): Promise<void>;
}

export type { RejectedEvent } from '../transport/ingest-validation.ts';

const OptionsSchema = z.strictObject({
  port: z.number().int().min(0).max(65535).default(0),
  host: z.string().min(1).default('127.0.0.1'),
  maxBodyBytes: z.number().int().positive().default(DEFAULT_MAX_BODY_BYTES),
  maxEventsPerRequest: z.number().int().positive().default(DEFAULT_MAX_EVENTS),
});
type ResolvedOptions = z.infer<typeof OptionsSchema>;

// Written by hand so the ConfigError reads "expected X, received Y" in user terms.
const EXPECTED: Record<string, string> = {
  port: 'an integer from 0 to 65535 (0 = let the OS pick a free port)',
  host: 'a non-empty host name or IP address',
  maxBodyBytes: 'a positive integer number of bytes',
  maxEventsPerRequest: 'a positive integer',
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
  const opts = parseOptions(options);
  const server = createServer((req, res) => {
    handle(target, opts, req, res).catch((err: unknown) => {
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
    close: () =>
      new Promise<void>((resolve, reject) => {
        // In-flight requests finish (their events may already be enqueued); idle keep-alives go now.
        server.close((err) => (err ? reject(err) : resolve()));
        server.closeIdleConnections();
      }),
  };
}

async function handle(target: IngestTarget, opts: ResolvedOptions, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const path = new URL(req.url ?? '/', 'http://localhost').pathname;
  const route = matchRoute(req.method ?? 'GET', path);
  if (route.kind === 'answer') return reply(res, route.answer);
  if (route.kind === 'health') return reply(res, healthAnswer(target.streams()));
  const stream = route.stream;
  const unknown = checkStream(stream, target.streams());
  if (unknown) return reply(res, unknown);
  const format = checkContentType(req.headers['content-type']);
  if (isAnswer(format)) return reply(res, format);
  const encoded = checkContentEncoding(req.headers['content-encoding']);
  if (encoded) return reply(res, encoded);

  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > opts.maxBodyBytes) return tooLarge(res, bodyLimitMessage(opts.maxBodyBytes, declared));
  const body = await readBody(req, opts.maxBodyBytes);
  if (body === undefined) return tooLarge(res, bodyLimitMessage(opts.maxBodyBytes));

  const parsed = parseBody(body, format, opts.maxEventsPerRequest);
  if (isAnswer(parsed)) return parsed.status === 413 ? tooLarge(res, String(parsed.body.message)) : reply(res, parsed);
  const checked = validateEvents(parsed.events, (event) => target.validate(stream, event));
  if (isAnswer(checked)) return reply(res, checked);

  const offered = target.offer(stream, checked.valid.map((v) => v.event));
  if (!offered.ok) return reply(res, saturatedAnswer(stream, offered.retryAfterMs));
  // Accepted means durable: the 202 waits until a logging target has the events on disk (a failure is a 500, never a 2xx).
  if ('durable' in offered && offered.durable) await offered.durable;
  reply(res, acceptedAnswer(checked.valid.length, parsed.events.length, checked.rejected));
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

export { locateJsonError };

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

export interface RejectedEvent {
  /** 0-based position of the event in the request (for JSON lines: among non-blank lines). */
  index: number;
  error: string;
}

const DEFAULT_MAX_BODY_BYTES = 1024 * 1024;
const DEFAULT_MAX_EVENTS = 10_000;
const ROUTES = 'POST /streams/:name/events, GET /healthz';
const ACCEPTED_TYPES = ['application/json', 'application/x-ndjson', 'application/jsonl'] as const;

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
  const method = req.method ?? 'GET';

  if (path === '/healthz') {
    if (method !== 'GET' && method !== 'HEAD') {
      return send(res, 405, { error: 'method_not_allowed', message: `${method} not allowed on /healthz; use GET` }, { Allow: 'GET, HEAD' });
    }
    return send(res, 200, { status: 'ok', streams: target.streams() });
  }

  const match = /^\/streams\/([^/]+)\/events\/?$/.exec(path);
  if (!match) {
    return send(res, 404, { error: 'not_found', message: `no route for ${method} ${path}; routes: ${ROUTES}` });
  }
  if (method !== 'POST') {
    return send(res, 405, { error: 'method_not_allowed', message: `${method} not allowed on ${path}; use POST` }, { Allow: 'POST' });
  }
  let stream: string;
  try {
    stream = decodeURIComponent(match[1]!);
  } catch {
    return send(res, 400, { error: 'bad_stream_name', message: `stream name "${match[1]}" is not valid percent-encoding` });
  }
  const known = target.streams();
  if (!known.includes(stream)) {
    const list = known.length > 0 ? known.map((s) => `"${s}"`).join(', ') : '(none)';
    return send(res, 404, {
      error: 'unknown_stream',
      message: `unknown stream "${stream}"; known streams: ${list}`,
      knownStreams: known,
    });
  }

  const contentType = req.headers['content-type'];
  const format = parseContentType(contentType);
  if (typeof format !== 'string' || !isFormat(format)) {
    const message = format && typeof format === 'object'
      ? format.message
      : `unsupported content-type ${contentType === undefined ? '(missing)' : `"${contentType}"`}; accepted: ${ACCEPTED_TYPES.join(', ')}`;
    return send(res, 415, { error: 'unsupported_media_type', message, accepted: ACCEPTED_TYPES });
  }

  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > opts.maxBodyBytes) {
    return tooLarge(res, `body of ${declared} bytes exceeds the limit of ${opts.maxBodyBytes} bytes`);
  }
  const body = await readBody(req, opts.maxBodyBytes);
  if (body === undefined) {
    return tooLarge(res, `body exceeds the limit of ${opts.maxBodyBytes} bytes`);
  }

  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(body);
  } catch {
    return send(res, 400, { error: 'malformed_body', message: 'body is not valid UTF-8' });
  }
  if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);

  const parsed = format === 'application/json' ? parseJsonArray(text, opts.maxEventsPerRequest) : parseJsonLines(text, opts.maxEventsPerRequest);
  if (!parsed.ok) {
    if (parsed.tooMany) return tooLarge(res, parsed.message);
    const { line, position } = parsed;
    return send(res, 400, { error: 'malformed_body', message: parsed.message, line, position });
  }
  const events = parsed.events;

  const valid: unknown[] = [];
  const rejected: RejectedEvent[] = [];
  events.forEach((event, index) => {
    const error = target.validate(stream, event);
    if (error === undefined) valid.push(event);
    else rejected.push({ index, error });
  });
  if (valid.length === 0) {
    return send(res, 400, {
      error: 'all_events_rejected',
      message: `${events.length === 1 ? 'the only event was' : `all ${events.length} events were`} rejected; nothing was enqueued`,
      accepted: 0,
      rejected,
    });
  }

  const offered = target.offer(stream, valid);
  if (!offered.ok) {
    const seconds = Math.max(1, Math.ceil(offered.retryAfterMs / 1000));
    return send(
      res,
      429,
      {
        error: 'saturated',
        message: `stream "${stream}" is saturated; nothing was enqueued; retry after ${offered.retryAfterMs} ms`,
        retryAfterMs: offered.retryAfterMs,
      },
      { 'Retry-After': String(seconds) },
    );
  }
  const message = rejected.length === 0
    ? `accepted ${plural(valid.length, 'event')}`
    : `accepted ${valid.length} of ${plural(events.length, 'event')}; ${rejected.length} rejected`;
  send(res, 202, { accepted: valid.length, rejected, message });
}

/** V8's own position (when present) is relative to what it parsed; ours is clearer. */
function syntaxMessage(err: unknown): string {
  return (err as Error).message.replace(/ in JSON at position \d+.*$/, '');
}

function plural(n: number, noun: string): string {
  return `${n} ${noun}${n === 1 ? '' : 's'}`;
}

type Format = (typeof ACCEPTED_TYPES)[number];
function isFormat(s: string): s is Format {
  return (ACCEPTED_TYPES as readonly string[]).includes(s);
}

/** Media type in lower case, or an explanation when the charset is not UTF-8. */
function parseContentType(header: string | undefined): string | { message: string } | undefined {
  if (!header) return undefined;
  const [type, ...params] = header.split(';');
  for (const param of params) {
    const [name, raw] = param.split('=').map((s) => s.trim().toLowerCase());
    const value = raw?.replace(/^"|"$/g, '');
    if (name === 'charset' && value !== 'utf-8' && value !== 'utf8') {
      return { message: `unsupported charset "${value}" in content-type "${header}"; only utf-8 is accepted` };
    }
  }
  return type!.trim().toLowerCase();
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

function tooLarge(res: ServerResponse, message: string): void {
  // Close after answering: the rest of an oversized upload is discarded, never buffered.
  send(res, 413, { error: 'payload_too_large', message }, { Connection: 'close' });
  res.req.resume();
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

type Parsed =
  | { ok: true; events: unknown[] }
  | { ok: false; message: string; tooMany?: boolean; line?: number; position?: number };

function parseJsonArray(text: string, maxEvents: number): Parsed {
  if (text.trim() === '') return { ok: false, message: 'body is empty; expected a JSON array of events' };
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    const position = locateJsonError(text);
    const before = text.slice(0, position);
    const line = before.split('\n').length;
    const column = position - before.lastIndexOf('\n');
    return {
      ok: false,
      position,
      message: `malformed JSON at position ${position} (line ${line}, column ${column}): ${syntaxMessage(err)}`,
    };
  }
  if (!Array.isArray(value)) {
    const kind = value === null ? 'null' : typeof value;
    return { ok: false, message: `expected a JSON array of events, received ${kind}` };
  }
  if (value.length === 0) return { ok: false, message: 'expected a non-empty JSON array of events, received []' };
  if (value.length > maxEvents) {
    return { ok: false, tooMany: true, message: `${value.length} events exceed the limit of ${maxEvents} per request` };
  }
  return { ok: true, events: value };
}

function parseJsonLines(text: string, maxEvents: number): Parsed {
  const events: unknown[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.endsWith('\r') ? lines[i]!.slice(0, -1) : lines[i]!;
    if (line.trim() === '') continue; // blank lines carry no event and take no index
    if (events.length === maxEvents) {
      return { ok: false, tooMany: true, message: `more than ${maxEvents} events in one request (limit ${maxEvents})` };
    }
    try {
      events.push(JSON.parse(line));
    } catch (err) {
      const column = locateJsonError(line) + 1;
      return { ok: false, line: i + 1, message: `malformed JSON on line ${i + 1}, column ${column}: ${syntaxMessage(err)}` };
    }
  }
  if (events.length === 0) return { ok: false, message: 'body contains no events; expected one JSON value per line' };
  return { ok: true, events };
}

/**
 * Offset of the first JSON syntax error in `text` (text.length if it ends too
 * early). Only called after JSON.parse failed, because Node 20's messages
 * mostly omit the position. Iterative, so deep nesting cannot overflow the stack.
 */
export function locateJsonError(text: string): number {
  let i = 0;
  const stack: string[] = [];
  const skipWs = () => {
    while (i < text.length && (text[i] === ' ' || text[i] === '\t' || text[i] === '\n' || text[i] === '\r')) i++;
  };
  const string = (): boolean => {
    if (text[i] !== '"') return false;
    i++;
    while (i < text.length) {
      const c = text.charCodeAt(i);
      if (c === 0x22) {
        i++;
        return true;
      }
      if (c < 0x20) return false;
      if (c === 0x5c) {
        const e = text[i + 1];
        if (e === 'u') {
          if (!/^[0-9a-fA-F]{4}$/.test(text.slice(i + 2, i + 6))) return (i += 2), false;
          i += 6;
        } else if (e !== undefined && '"\\/bfnrt'.includes(e)) i += 2;
        else return (i += 1), false;
      } else i++;
    }
    return false;
  };
  const key = (): boolean => {
    skipWs();
    if (!string()) return false;
    skipWs();
    if (text[i] !== ':') return false;
    i++;
    return true;
  };
  const number = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;
  for (;;) {
    skipWs();
    const c = text[i];
    if (c === '[' || c === '{') {
      i++;
      skipWs();
      if (text[i] === (c === '[' ? ']' : '}')) i++;
      else {
        stack.push(c);
        if (c === '{' && !key()) return i;
        continue;
      }
    } else if (c === '"') {
      if (!string()) return i;
    } else if (text.startsWith('true', i) || text.startsWith('null', i)) i += 4;
    else if (text.startsWith('false', i)) i += 5;
    else {
      number.lastIndex = i;
      if (!number.test(text)) return i;
      i = number.lastIndex;
    }
    // After a value: close containers, or find the separator before the next value.
    for (;;) {
      skipWs();
      if (stack.length === 0) return i;
      const top = stack[stack.length - 1];
      if (text[i] === ',') {
        i++;
        if (top === '{' && !key()) return i;
        break;
      }
      if (text[i] !== (top === '[' ? ']' : '}')) return i;
      stack.pop();
      i++;
    }
  }
}

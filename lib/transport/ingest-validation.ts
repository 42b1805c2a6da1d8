/**
 * The ingestion endpoint's request semantics as pure functions, shared by the
 * embedded HTTP server (lib/local/ingest-server.ts) and the ingest Lambda handler
 * (lib/aws/ingest/ingest-handler.ts), so both answer the same input with the same status,
 * error code and message:
 *
 *   POST /streams/:name/events   body: JSON array, or JSON lines (one event per line)
 *   GET  /healthz
 *
 * 202 {accepted, rejected: [{index, error}], message} once at least one event is
 * accepted; 400 malformed body / every event invalid; 404 unknown route or stream;
 * 405 wrong method; 413 body or event count above the limit; 415 content type or a
 * Content-Encoding other than identity; 429 + Retry-After when saturated (nothing enqueued).
 * Every event's nesting is bounded (checkEvent) before the endpoint's own validation walks
 * it; that validation also checks its event time (checkEventTime, toIngestRecord in
 * sources.ts).
 */

export const DEFAULT_MAX_BODY_BYTES = 1024 * 1024;
export const DEFAULT_MAX_EVENTS = 10_000;
export const ROUTES = 'POST /streams/:name/events, GET /healthz';
export const ACCEPTED_TYPES = ['application/json', 'application/x-ndjson', 'application/jsonl'] as const;
export type Format = (typeof ACCEPTED_TYPES)[number];

export interface RejectedEvent {
  /** 0-based position of the event in the request (for JSON lines: among non-blank lines). */
  index: number;
  error: string;
  /** Set when the same event may succeed later (the queue refused it transiently). */
  retryable?: boolean;
}

/** A complete answer: status, JSON body, extra headers. */
export interface IngestAnswer {
  readonly status: number;
  readonly body: Record<string, unknown>;
  readonly headers?: Readonly<Record<string, string>>;
}

export type Route = { kind: 'health' } | { kind: 'events'; stream: string } | { kind: 'answer'; answer: IngestAnswer };

/** Which endpoint a request addresses, or the 404/405/400 answer. `path` is the URL path without query. */
export function matchRoute(method: string, path: string): Route {
  if (path === '/healthz') {
    if (method !== 'GET' && method !== 'HEAD') {
      return answer(405, { error: 'method_not_allowed', message: `${method} not allowed on /healthz; use GET` }, { Allow: 'GET, HEAD' });
    }
    return { kind: 'health' };
  }
  const match = /^\/streams\/([^/]+)\/events\/?$/.exec(path);
  if (!match) return answer(404, { error: 'not_found', message: `no route for ${method} ${path}; routes: ${ROUTES}` });
  if (method !== 'POST') return answer(405, { error: 'method_not_allowed', message: `${method} not allowed on ${path}; use POST` }, { Allow: 'POST' });
  try {
    return { kind: 'events', stream: decodeURIComponent(match[1]!) };
  } catch {
    return answer(400, { error: 'bad_stream_name', message: `stream name "${match[1]}" is not valid percent-encoding` });
  }
}

export function healthAnswer(streams: readonly string[]): IngestAnswer {
  return { status: 200, body: { status: 'ok', streams } };
}

/** 404 for a stream the job does not have; undefined when known. */
export function checkStream(stream: string, known: readonly string[]): IngestAnswer | undefined {
  if (known.includes(stream)) return undefined;
  const list = known.length > 0 ? known.map((s) => `"${s}"`).join(', ') : '(none)';
  return { status: 404, body: { error: 'unknown_stream', message: `unknown stream "${stream}"; known streams: ${list}`, knownStreams: known } };
}

/** The body format from the Content-Type header, or the 415 answer. */
export function checkContentType(header: string | undefined): Format | IngestAnswer {
  const format = parseContentType(header);
  if (typeof format === 'string' && isFormat(format)) return format;
  const message =
    format && typeof format === 'object'
      ? format.message
      : `unsupported content-type ${header === undefined ? '(missing)' : `"${header}"`}; accepted: ${ACCEPTED_TYPES.join(', ')}`;
  return { status: 415, body: { error: 'unsupported_media_type', message, accepted: ACCEPTED_TYPES } };
}

/**
 * 415 for a body in a content coding other than identity (gzip, br, ...): it is never
 * decoded, so it must not reach the UTF-8 and JSON checks as if it were text.
 */
export function checkContentEncoding(header: string | undefined): IngestAnswer | undefined {
  const codings = (header ?? '')
    .split(',')
    .map((c) => c.trim().toLowerCase())
    .filter((c) => c !== '' && c !== 'identity');
  if (codings.length === 0) return undefined;
  return {
    status: 415,
    body: { error: 'unsupported_content_encoding', message: `unsupported content-encoding "${header}"; send the body uncompressed (identity)`, accepted: ['identity'] },
    headers: { 'Accept-Encoding': 'identity' },
  };
}

/**
 * Deepest nesting of arrays and objects an event may have (a scalar is depth 0, `{}` 1).
 * Far above real events, and low enough that nothing downstream that walks an event
 * recursively (schemas, encoders, JSON.stringify) can run out of stack.
 */
export const MAX_EVENT_DEPTH = 64;

/** The error for an event nested deeper than `limit`, or undefined. Iterative: any depth is safe to check. */
export function checkEvent(event: unknown, limit = MAX_EVENT_DEPTH): string | undefined {
  if (typeof event !== 'object' || event === null) return undefined;
  const stack: { value: object; depth: number }[] = [{ value: event, depth: 1 }];
  while (stack.length > 0) {
    const { value, depth } = stack.pop()!;
    if (depth > limit) return `(event): expected at most ${limit} levels of nested arrays and objects, received more than ${limit}`;
    const children = Array.isArray(value) ? value : Object.values(value);
    for (const child of children) if (typeof child === 'object' && child !== null) stack.push({ value: child, depth: depth + 1 });
  }
  return undefined;
}

/**
 * The error for an event time the runtime cannot use, or undefined: not an integer number
 * of epoch milliseconds (windows and timers name times by integer), or more than
 * `maxFutureMs` ahead of `arrival` (one far-future event would make every later one late).
 */
export function checkEventTime(timestamp: number, arrival: number, maxFutureMs: number | undefined): string | undefined {
  if (!Number.isSafeInteger(timestamp)) return `timestamp: expected an integer number of epoch milliseconds, received ${timestamp}`;
  if (maxFutureMs !== undefined && timestamp - arrival > maxFutureMs) {
    return `timestamp: expected at most ${maxFutureMs} ms after arrival (maxFutureMs; arrival ${arrival}, ${isoTime(arrival)}), received ${timestamp} (${isoTime(timestamp)}, ${timestamp - arrival} ms ahead)`;
  }
  return undefined;
}

function isoTime(t: number): string {
  const d = new Date(t);
  return Number.isNaN(d.getTime()) ? 'outside the date range' : d.toISOString();
}

export function isAnswer(x: unknown): x is IngestAnswer {
  return typeof x === 'object' && x !== null && 'status' in x && 'body' in x;
}

export function tooLargeAnswer(message: string): IngestAnswer {
  return { status: 413, body: { error: 'payload_too_large', message } };
}

export function bodyLimitMessage(limit: number, bytes?: number): string {
  return bytes === undefined ? `body exceeds the limit of ${limit} bytes` : `body of ${bytes} bytes exceeds the limit of ${limit} bytes`;
}

/** Decode and parse a body (UTF-8, BOM stripped) into events, or the 400/413 answer. */
export function parseBody(body: Uint8Array, format: Format, maxEvents: number): { events: unknown[] } | IngestAnswer {
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(body);
  } catch {
    return { status: 400, body: { error: 'malformed_body', message: 'body is not valid UTF-8' } };
  }
  if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
  const parsed = format === 'application/json' ? parseJsonArray(text, maxEvents) : parseJsonLines(text, maxEvents);
  if (parsed.ok) return { events: parsed.events };
  if (parsed.tooMany) return tooLargeAnswer(parsed.message);
  return { status: 400, body: { error: 'malformed_body', message: parsed.message, line: parsed.line, position: parsed.position } };
}

/** Validate every event (its depth first, then `validate`); the 400 answer when none is valid. */
export function validateEvents(events: readonly unknown[], validate: (event: unknown, index: number) => string | undefined): { valid: { index: number; event: unknown }[]; rejected: RejectedEvent[] } | IngestAnswer {
  const valid: { index: number; event: unknown }[] = [];
  const rejected: RejectedEvent[] = [];
  events.forEach((event, index) => {
    const error = checkEvent(event) ?? validate(event, index);
    if (error === undefined) valid.push({ index, event });
    else rejected.push({ index, error });
  });
  if (valid.length === 0) return allRejectedAnswer(events.length, rejected);
  return { valid, rejected };
}

export function allRejectedAnswer(total: number, rejected: readonly RejectedEvent[]): IngestAnswer {
  return {
    status: 400,
    body: { error: 'all_events_rejected', message: `${total === 1 ? 'the only event was' : `all ${total} events were`} rejected; nothing was enqueued`, accepted: 0, rejected },
  };
}

export function saturatedAnswer(stream: string, retryAfterMs: number, detail = 'is saturated'): IngestAnswer {
  const seconds = Math.max(1, Math.ceil(retryAfterMs / 1000));
  return {
    status: 429,
    body: { error: 'saturated', message: `stream "${stream}" ${detail}; nothing was enqueued; retry after ${retryAfterMs} ms`, retryAfterMs },
    headers: { 'Retry-After': String(seconds) },
  };
}

/** An event the stream's load shedding dropped (SourceOptions.shed): never enqueued. */
export interface ShedEvent {
  readonly index: number;
  readonly reason: string;
}

export function acceptedAnswer(accepted: number, total: number, rejected: readonly RejectedEvent[], shed: readonly ShedEvent[] = []): IngestAnswer {
  const parts = [...(rejected.length ? [`${rejected.length} rejected`] : []), ...(shed.length ? [`${shed.length} shed (load shedding: ${shed[0].reason})`] : [])];
  const message = parts.length === 0 ? `accepted ${plural(accepted, 'event')}` : `accepted ${accepted} of ${plural(total, 'event')}; ${parts.join(', ')}`;
  return { status: 202, body: { accepted, rejected: [...rejected].sort((a, b) => a.index - b.index), ...(shed.length ? { shed } : {}), message } };
}

export function plural(n: number, noun: string): string {
  return `${n} ${noun}${n === 1 ? '' : 's'}`;
}

function answer(status: number, body: Record<string, unknown>, headers?: Record<string, string>): Route {
  return { kind: 'answer', answer: { status, body, headers } };
}

function isFormat(s: string): s is Format {
  return (ACCEPTED_TYPES as readonly string[]).includes(s);
}

/** Media type in lower case, or an explanation when the charset is not UTF-8. */
export function parseContentType(header: string | undefined): string | { message: string } | undefined {
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

/** V8's own position (when present) is relative to what it parsed; ours is clearer. */
function syntaxMessage(err: unknown): string {
  return (err as Error).message.replace(/ in JSON at position \d+.*$/, '');
}

export type Parsed = { ok: true; events: unknown[] } | { ok: false; message: string; tooMany?: boolean; line?: number; position?: number };

export function parseJsonArray(text: string, maxEvents: number): Parsed {
  if (text.trim() === '') return { ok: false, message: 'body is empty; expected a JSON array of events' };
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    const position = locateJsonError(text);
    const before = text.slice(0, position);
    const line = before.split('\n').length;
    const column = position - before.lastIndexOf('\n');
    return { ok: false, position, message: `malformed JSON at position ${position} (line ${line}, column ${column}): ${syntaxMessage(err)}` };
  }
  if (!Array.isArray(value)) {
    const kind = value === null ? 'null' : typeof value;
    return { ok: false, message: `expected a JSON array of events, received ${kind}` };
  }
  if (value.length === 0) return { ok: false, message: 'expected a non-empty JSON array of events, received []' };
  if (value.length > maxEvents) return { ok: false, tooMany: true, message: `${value.length} events exceed the limit of ${maxEvents} per request` };
  return { ok: true, events: value };
}

export function parseJsonLines(text: string, maxEvents: number): Parsed {
  const events: unknown[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.endsWith('\r') ? lines[i]!.slice(0, -1) : lines[i]!;
    if (line.trim() === '') continue; // blank lines carry no event and take no index
    if (events.length === maxEvents) return { ok: false, tooMany: true, message: `more than ${maxEvents} events in one request (limit ${maxEvents})` };
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

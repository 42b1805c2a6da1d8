/**
 * A client of the ingestion endpoint (`sluice dev`'s, or a deployed job's ingest function):
 * `POST /streams/<name>/events` in batches, one at a time, so per-key order is the order given.
 *
 * - Batches stay within the endpoint's per-request limits (`maxEventsPerRequest`,
 *   `maxBytesPerRequest`); a 413 (the endpoint's limits lower than ours) splits the batch
 *   in halves, and a single event still too large is reported rejected.
 * - Every batch carries an Idempotency-Key, the same on each resend of it: an endpoint
 *   that remembers keys enqueues a resent batch once, and answers a batch it already took
 *   with its first answer (`replay: true`).
 * - 429 (nothing enqueued) is resent after Retry-After (seconds or an HTTP date; the body's
 *   `retryAfterMs` when it asks for longer); 5xx (perhaps partly enqueued) after Retry-After
 *   or an exponential backoff with jitter; at most `retries` resends per batch. Waiting
 *   goes through `sleep` and HTTP dates are read against `now`, so tests inject both.
 * - A network failure is not resent: without a key-remembering endpoint a resend could
 *   enqueue the batch twice. Nor is a 409 (the same key gets the same answer), a 4xx.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { z } from 'zod';
import { BackPressureError, ConfigError, InputRejectedError, InvariantError } from '../errors.ts';

/** A request as a `sign` hook sees it (header names in lower case). */
export interface SignableRequest {
  readonly method: string;
  readonly url: URL;
  readonly headers: Record<string, string>;
  readonly body: string;
}

export interface IngestClientOptions {
  /** Base URL of the endpoint, e.g. http://127.0.0.1:8787 (a deployed job's EndpointUrl). */
  url: string;
  /** Most events per request; default 500 (the embedded endpoint takes 10,000). */
  maxEventsPerRequest?: number;
  /** Most body bytes per request; default 1,000,000 (the embedded endpoint takes 1 MiB). */
  maxBytesPerRequest?: number;
  /** Resends of one batch after a 429 or a 5xx; default 5 (so at most 6 attempts). */
  retries?: number;
  /** First backoff after a 5xx without Retry-After, doubled per retry (with jitter, at most 30 s); default 500 ms. */
  retryBaseMs?: number;
  /** Longest single wait; a longer Retry-After is cut to this. Default 120,000 ms. */
  maxRetryDelayMs?: number;
  /** The headers to send for a request (SigV4, a bearer token); default: the request's own. */
  sign?: (request: SignableRequest) => Promise<Record<string, string>>;
  /** What a 401/403 means for this client (the credentials used, the grant they need). */
  authHint?: () => string;
  /** Waits between attempts; default a timer. Rejects when `signal` aborts. */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** Epoch milliseconds, for Retry-After given as an HTTP date; default Date.now. */
  now?: () => number;
  /** The fetch to send with; default the global one. */
  fetch?: typeof fetch;
}

/** Per call of send/sendLines. */
export interface SendOptions {
  /** Stops waiting and sending; what was answered before stays answered. */
  signal?: AbortSignal;
  /** The Idempotency-Key of the batch of events from..to (indexes, inclusive); default `<a UUID per call>:<from>-<to>`. */
  idempotencyKey?: (from: number, to: number) => string;
  /** How errors name a batch; default `events <from>-<to>`. */
  nameBatch?: (from: number, to: number) => string;
  /** How errors name what was accepted before the failing batch; default `<n> events of earlier batches were accepted`. */
  nameEarlier?: (accepted: number) => string;
}

export interface IngestResult {
  /** Events posted and answered (accepted, rejected or shed). */
  sent: number;
  accepted: number;
  /** Refused events by index into the events given, in order. */
  rejected: { index: number; error: string }[];
  /** Events the stream's load shedding dropped (answered, never enqueued), by index. */
  shed: { index: number; reason: string }[];
  /** Batches the endpoint had already taken (a resend after a lost answer): their first answer came back, nothing was enqueued again. */
  replayed: { from: number; to: number; idempotencyKey: string }[];
  /** HTTP requests sent. */
  requests: number;
  /** Answers resent: 429 (`saturated`) and 5xx (`failed`). */
  retried: { saturated: number; failed: number };
}

/** The endpoint refused a batch for good (401/403/409/other 4xx, or a 5xx after every retry). */
export class IngestRefusedError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
    this.name = 'IngestRefusedError';
  }
}

/** An answer as read: status, headers, the JSON body (or `{message}` with its text). */
export interface IngestReply {
  status: number;
  headers: Headers;
  body: Record<string, unknown>;
}

const MAX_BACKOFF_MS = 30_000;

const OptionsSchema = z.object({
  url: z.string().refine((s) => URL.canParse(s) && /^https?:$/.test(new URL(s).protocol)),
  maxEventsPerRequest: z.number().int().positive().default(500),
  maxBytesPerRequest: z.number().int().positive().default(1_000_000),
  retries: z.number().int().min(0).default(5),
  retryBaseMs: z.number().min(0).default(500),
  maxRetryDelayMs: z.number().min(0).default(120_000),
});

const EXPECTED: Record<string, string> = {
  url: 'an http(s) URL such as http://127.0.0.1:8787',
  maxEventsPerRequest: 'a positive integer',
  maxBytesPerRequest: 'a positive integer number of bytes',
  retries: 'an integer >= 0',
  retryBaseMs: 'a number of milliseconds >= 0',
  maxRetryDelayMs: 'a number of milliseconds >= 0',
};

/** Retry-After in milliseconds: delta-seconds or an HTTP date; undefined when absent or unreadable. */
export function parseRetryAfter(value: string | null | undefined, now = Date.now()): number | undefined {
  if (value === null || value === undefined) return undefined;
  const v = value.trim();
  if (/^\d+(?:\.\d+)?$/.test(v)) return Number(v) * 1000;
  const at = Date.parse(v);
  return Number.isFinite(at) ? Math.max(0, at - now) : undefined;
}

/**
 * How long to wait before resending: at least Retry-After (and the body's retryAfterMs,
 * when it asks for longer), at most `maxMs`; else exponential backoff with jitter.
 */
export function retryDelay(reply: IngestReply, attempt: number, baseMs: number, now = Date.now(), maxMs = 120_000): number {
  const fromBody = typeof reply.body.retryAfterMs === 'number' && reply.body.retryAfterMs >= 0 ? reply.body.retryAfterMs : undefined;
  const fromHeader = parseRetryAfter(reply.headers.get('retry-after'), now);
  const asked = fromBody === undefined ? fromHeader : fromHeader === undefined ? fromBody : Math.max(fromBody, fromHeader);
  if (asked !== undefined) return Math.min(asked, maxMs);
  const ceiling = Math.min(baseMs * 2 ** attempt, MAX_BACKOFF_MS, maxMs);
  return ceiling / 2 + Math.random() * (ceiling / 2);
}

export class IngestClient {
  private readonly opts: z.infer<typeof OptionsSchema>;
  private readonly base: string;
  private readonly hooks: Pick<IngestClientOptions, 'sign' | 'authHint'> & Required<Pick<IngestClientOptions, 'sleep' | 'now' | 'fetch'>>;

  constructor(given: IngestClientOptions) {
    const options = given ?? ({} as IngestClientOptions);
    const parsed = OptionsSchema.safeParse(options);
    if (!parsed.success) {
      const field = String(parsed.error.issues[0]!.path[0] ?? 'options');
      const received = (options as unknown as Record<string, unknown>)[field];
      throw new ConfigError(`ingest client ${field}`, EXPECTED[field] ?? 'an options object', JSON.stringify(received) ?? 'undefined');
    }
    for (const hook of ['sign', 'authHint', 'sleep', 'now', 'fetch'] as const) {
      const value = options[hook];
      if (value !== undefined && typeof value !== 'function') throw new ConfigError(`ingest client ${hook}`, 'a function', typeof value);
    }
    this.opts = parsed.data;
    this.base = this.opts.url.endsWith('/') ? this.opts.url : `${this.opts.url}/`;
    this.hooks = {
      sign: options.sign,
      authHint: options.authHint,
      sleep: options.sleep ?? ((ms, signal) => delay(ms, undefined, { signal })),
      now: options.now ?? Date.now,
      fetch: options.fetch ?? ((input, init) => fetch(input, init)),
    };
  }

  /** The URL events of `stream` are posted to. */
  endpoint(stream: string): URL {
    return new URL(`streams/${encodeURIComponent(stream)}/events`, this.base);
  }

  /** Sends `events` (each serialised with JSON.stringify) to `stream`; resolves once every batch is answered. */
  async send(stream: string, events: readonly unknown[], options: SendOptions = {}): Promise<IngestResult> {
    if (!Array.isArray(events)) throw new InputRejectedError('events', 'an array of events', typeof events);
    const lines = events.map((e, i) => {
      let text: string | undefined;
      try {
        text = JSON.stringify(e);
      } catch (err) {
        throw new InputRejectedError(`events[${i}]`, 'a JSON-serialisable value', `${typeof e} (${(err as Error).message})`);
      }
      if (typeof text !== 'string') throw new InputRejectedError(`events[${i}]`, 'a JSON-serialisable value', typeof e);
      return text;
    });
    return this.sendLines(stream, lines, options);
  }

  /** Sends events already serialised, one JSON text each (a JSON-lines file's lines), as they are. */
  async sendLines(stream: string, lines: readonly string[], options: SendOptions = {}): Promise<IngestResult> {
    if (typeof stream !== 'string' || stream === '') throw new ConfigError('ingest client stream', 'a non-empty stream name', JSON.stringify(stream) ?? 'undefined');
    if (!Array.isArray(lines) || lines.some((l) => typeof l !== 'string')) throw new InputRejectedError('lines', 'an array of JSON texts (strings)', Array.isArray(lines) ? 'an array with a non-string' : typeof lines);
    const call = randomUUID();
    const keyFor = options.idempotencyKey ?? ((from, to) => `${call}:${from}-${to}`);
    const nameBatch = options.nameBatch ?? ((from, to) => (from === to ? `event ${from}` : `events ${from}-${to}`));
    const nameEarlier = options.nameEarlier ?? ((n) => `${n} events of earlier batches were accepted`);
    const result: IngestResult = { sent: 0, accepted: 0, rejected: [], shed: [], replayed: [], requests: 0, retried: { saturated: 0, failed: 0 } };
    const batch = { stream, lines, keyFor, nameBatch, nameEarlier, signal: options.signal, result };
    let from = 0;
    let bytes = 0;
    for (let i = 0; i < lines.length; i++) {
      const size = Buffer.byteLength(lines[i]) + 1;
      if (i > from && bytes + size > this.opts.maxBytesPerRequest) {
        await this.post(batch, from, i - 1);
        from = i;
        bytes = 0;
      }
      bytes += size;
      if (i + 1 - from >= this.opts.maxEventsPerRequest) {
        await this.post(batch, from, i);
        from = i + 1;
        bytes = 0;
      }
    }
    if (from < lines.length) await this.post(batch, from, lines.length - 1);
    result.rejected.sort((a, b) => a.index - b.index);
    result.shed.sort((a, b) => a.index - b.index);
    return result;
  }

  /** Posts lines from..to (inclusive) until answered for good. */
  private async post(b: Batch, from: number, to: number): Promise<void> {
    const { result } = b;
    const endpoint = this.endpoint(b.stream);
    const key = b.keyFor(from, to);
    const name = b.nameBatch(from, to);
    const count = to - from + 1;
    const body = b.lines.slice(from, to + 1).join('\n') + '\n';
    const notAccepted = () => `${name} were not accepted (${b.nameEarlier(result.accepted)})`;
    for (let attempt = 0; ; attempt++) {
      b.signal?.throwIfAborted();
      const reply = await this.request(endpoint, body, key, b.signal, () => `${name} may not have been accepted (${b.nameEarlier(result.accepted)})`);
      result.requests++;
      if (reply.status === 202 || (reply.status === 400 && Array.isArray(reply.body.rejected))) {
        const accepted = typeof reply.body.accepted === 'number' ? reply.body.accepted : 0;
        const rejected = (reply.body.rejected ?? []) as { index: number; error: string }[];
        const shed = (Array.isArray(reply.body.shed) ? reply.body.shed : []) as { index: number; reason: string }[];
        if (accepted + rejected.length + shed.length !== count) {
          throw new InvariantError(`server answered accepted ${accepted} + rejected ${rejected.length} + shed ${shed.length} for a batch of ${count} events (${name})`);
        }
        for (const [list, what] of [[rejected, 'rejected'], [shed, 'shed']] as const) {
          for (const e of list) {
            if (!Number.isInteger(e.index) || e.index < 0 || e.index >= count) throw new InvariantError(`server ${what} index ${e.index}, but the batch has ${count} events (${name})`);
          }
        }
        result.sent += count;
        result.accepted += accepted;
        for (const r of rejected) result.rejected.push({ index: from + r.index, error: r.error });
        for (const s of shed) result.shed.push({ index: from + s.index, reason: s.reason });
        if (reply.body.replay === true) result.replayed.push({ from, to, idempotencyKey: key });
        return;
      }
      const wait = () => retryDelay(reply, attempt, this.opts.retryBaseMs, this.hooks.now(), this.opts.maxRetryDelayMs);
      if (reply.status === 429) {
        // Nothing of the batch was enqueued.
        const ms = wait();
        if (attempt >= this.opts.retries) {
          throw new BackPressureError(ms, `stream "${b.stream}" still saturated after ${this.opts.retries} retries; ${name} were not enqueued (${b.nameEarlier(result.accepted)})`);
        }
        result.retried.saturated++;
        await this.hooks.sleep(ms, b.signal);
        continue;
      }
      if (reply.status >= 500) {
        // Perhaps partly enqueued: the resend carries the same Idempotency-Key.
        if (attempt >= this.opts.retries) {
          const unknown = reply.body.error === 'outcome_unknown' || Array.isArray(reply.body.unconfirmed);
          throw new IngestRefusedError(
            reply.status,
            `POST ${endpoint.href} answered HTTP ${reply.status} ${this.opts.retries + 1} times (last: ${messageOf(reply.body, 'no message')}); ` +
              (unknown ? `some of ${name} may have been enqueued (Idempotency-Key: ${key}); ` : `${name} were not accepted; `) +
              b.nameEarlier(result.accepted),
          );
        }
        result.retried.failed++;
        await this.hooks.sleep(wait(), b.signal);
        continue;
      }
      if (reply.status === 413) {
        if (count > 1) {
          const half = from + Math.ceil(count / 2);
          await this.post(b, from, half - 1);
          await this.post(b, half, to);
        } else {
          result.sent += 1;
          result.rejected.push({ index: from, error: messageOf(reply.body, 'event too large') });
        }
        return;
      }
      if (reply.status === 409) {
        throw new IngestRefusedError(409, `POST ${endpoint.href} refused ${name} with Idempotency-Key ${key} (HTTP 409 ${String(reply.body.error ?? 'conflict')}): ${messageOf(reply.body, 'no message')}; ${notAccepted()}`);
      }
      if (reply.status === 404 && Array.isArray(reply.body.knownStreams)) {
        const known = (reply.body.knownStreams as string[]).map((s) => `"${s}"`).join(', ') || '(none)';
        throw new InputRejectedError('stream', `one of ${known}`, `"${b.stream}"`);
      }
      if (reply.status === 401 || reply.status === 403) {
        const hint = this.hooks.authHint?.() ?? (this.hooks.sign ? 'the endpoint refused the signed request' : 'the request was not signed (give the client a `sign` hook)');
        throw new IngestRefusedError(reply.status, `POST ${endpoint.href} answered HTTP ${reply.status} (${messageOf(reply.body, 'no message')}): ${hint}; ${notAccepted()}`);
      }
      throw new IngestRefusedError(reply.status, `POST ${endpoint.href} answered HTTP ${reply.status}: ${messageOf(reply.body, 'no message')}; ${notAccepted()}`);
    }
  }

  private async request(endpoint: URL, body: string, key: string, signal: AbortSignal | undefined, unsure: () => string): Promise<IngestReply> {
    let headers: Record<string, string> = { 'content-type': 'application/x-ndjson', 'idempotency-key': key };
    if (this.hooks.sign) headers = await this.hooks.sign({ method: 'POST', url: endpoint, headers, body });
    let res: Response;
    let text: string;
    try {
      res = await this.hooks.fetch(endpoint, { method: 'POST', headers, body, signal });
      text = await res.text();
    } catch (err) {
      if (signal?.aborted) throw signal.reason;
      const cause = (err as { cause?: { message?: string } }).cause?.message ?? (err as Error).message;
      throw new Error(`POST ${endpoint.href} failed (${cause}); ${unsure()}`, { cause: err });
    }
    let parsed: Record<string, unknown> = {};
    try {
      const value: unknown = JSON.parse(text);
      if (value && typeof value === 'object' && !Array.isArray(value)) parsed = value as Record<string, unknown>;
    } catch {
      parsed = { message: text.slice(0, 200) };
    }
    return { status: res.status, headers: res.headers, body: parsed };
  }
}

interface Batch {
  readonly stream: string;
  readonly lines: readonly string[];
  readonly keyFor: (from: number, to: number) => string;
  readonly nameBatch: (from: number, to: number) => string;
  readonly nameEarlier: (accepted: number) => string;
  readonly signal: AbortSignal | undefined;
  readonly result: IngestResult;
}

/** Sends `events` to `stream` at `url` with a client of `options` (IngestClient.send). */
export function publishEvents(url: string, stream: string, events: readonly unknown[], options: Omit<IngestClientOptions, 'url'> & SendOptions = {}): Promise<IngestResult> {
  const { signal, idempotencyKey, nameBatch, nameEarlier, ...client } = options;
  return new IngestClient({ ...client, url }).send(stream, events, { signal, idempotencyKey, nameBatch, nameEarlier });
}

/** The answer's message: ours and HTTP APIs' say `message`, Function URLs' `Message`. */
function messageOf(body: Record<string, unknown>, fallback: string): string {
  const m = body.message ?? body.Message;
  return typeof m === 'string' && m !== '' ? m : fallback;
}

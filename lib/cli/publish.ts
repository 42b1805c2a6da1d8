/**
 * `sluice publish`: stream a JSON-lines file to an ingestion endpoint in
 * batches. The file is read line by line (never whole), batches are posted
 * one at a time so per-key order is the file's order, and the server's
 * per-event rejections are reported by file line.
 *
 * - Deployed endpoints use IAM auth: requests to an HTTP API
 *   (`<id>.execute-api.<region>.amazonaws.com`) or a Lambda Function URL
 *   (`<id>.lambda-url.<region>.on.aws`) are signed with SigV4 (sigv4.ts, loaded
 *   only then), with the default credential chain's credentials.
 * - Every batch carries an Idempotency-Key, the same on each resend of that batch:
 *   both endpoints remember it, so a batch sent again after an unknown outcome (a 5xx)
 *   is not enqueued twice; an answer the endpoint gives again for a batch it already
 *   took (`replay: true`) is counted as that batch's and reported. A 409 (the key held
 *   by another body, or a resend too late to be deduplicated) fails the publish.
 * - 429 (nothing enqueued) is retried after Retry-After (seconds or an HTTP date),
 *   5xx after Retry-After or an exponential backoff, at most `retries` times per batch.
 */
import { randomUUID } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import { BackPressureError, ConfigError, InputRejectedError, InvariantError } from '../errors.ts';
import type { RequestSigner, SigningScope } from './sigv4.ts';

export const SIGN_MODES = ['auto', 'always', 'never'] as const;
/**
 * auto: sign when the URL's host is an AWS endpoint (execute-api or lambda-url), or when
 * `service` is given; always: sign (region and service from the host, or the options);
 * never: send unsigned.
 */
export type SignMode = (typeof SIGN_MODES)[number];

export interface PublishOptions {
  /** Base URL of the ingestion endpoint, e.g. http://127.0.0.1:8787 */
  url: string;
  stream: string;
  /** Path of a JSON-lines file (one event per line; blank lines are skipped). */
  file: string;
  /** Most events per request; default 500. */
  batchSize?: number;
  /** Show a progress bar (bytes of the file) on stderr. */
  progress?: boolean;
  /** How many times one batch is resent after a 429 or a 5xx; default 5. */
  retries?: number;
  /** Most body bytes per request, kept under the server's limit; default 1,000,000. */
  maxBatchBytes?: number;
  /** SigV4 signing; default 'auto' (AWS hosts only). */
  sign?: SignMode;
  /** Signing region; default the host's (`...execute-api.<region>.amazonaws.com`), else AWS_REGION. */
  region?: string;
  /** Signing service (`execute-api`, `lambda`); default the host's. */
  service?: string;
  /** First backoff after a 5xx without Retry-After, doubled per retry (with jitter, at most 30 s); default 500 ms. */
  retryBaseMs?: number;
}

/** The endpoint refused the request for good (403, or a 5xx or a 429 after every retry when no other error fits). */
export class PublishRefusedError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
    this.name = 'PublishRefusedError';
  }
}

export interface PublishResult {
  /** Events posted to the server (malformed lines are not sent). */
  sent: number;
  accepted: number;
  /** Rejected events by 1-based file line, in file order: malformed JSON, or refused by the server. */
  rejected: { line: number; error: string }[];
  /** Batches the endpoint had already taken (a resend after a lost answer): its first answer came back, nothing was enqueued again. */
  replayed: { lines: string; idempotencyKey: string }[];
  /** Events the stream's load shedding dropped (SourceOptions.shed), by 1-based file line: answered, never enqueued. */
  shed: { line: number; reason: string }[];
}

const OptionsSchema = z.object({
  url: z.string().refine((s) => URL.canParse(s) && /^https?:$/.test(new URL(s).protocol)),
  stream: z.string().min(1),
  file: z.string().min(1),
  batchSize: z.number().int().positive().default(500),
  progress: z.boolean().default(false),
  retries: z.number().int().min(0).default(5),
  maxBatchBytes: z.number().int().positive().default(1_000_000),
  sign: z.enum(SIGN_MODES).default('auto'),
  region: z.string().regex(/^[a-z0-9-]+$/).optional(),
  service: z.string().regex(/^[a-z0-9-]+$/).optional(),
  retryBaseMs: z.number().min(0).default(500),
});

const EXPECTED: Record<string, string> = {
  url: 'an http(s) URL such as http://127.0.0.1:8787',
  stream: 'a non-empty stream name',
  file: 'a path to a JSON-lines file',
  batchSize: 'a positive integer',
  progress: 'true or false',
  retries: 'an integer >= 0',
  maxBatchBytes: 'a positive integer number of bytes',
  sign: 'one of auto, always, never',
  region: 'an AWS region such as eu-west-1',
  service: 'a SigV4 service name such as execute-api or lambda',
  retryBaseMs: 'a number of milliseconds >= 0',
};

/** Longest wait for one Retry-After; a longer one is cut to this. */
const MAX_RETRY_DELAY_MS = 120_000;
const MAX_BACKOFF_MS = 30_000;

/** The SigV4 scope an AWS ingestion URL implies: HTTP APIs (execute-api) and Lambda Function URLs (lambda). */
export function awsEndpointOf(url: string | URL): SigningScope | undefined {
  const host = (typeof url === 'string' ? new URL(url) : url).hostname.toLowerCase();
  const api = /^[a-z0-9]+\.execute-api\.([a-z]{2}(?:-[a-z]+)+-\d+)\.amazonaws\.com(?:\.cn)?$/.exec(host);
  if (api) return { service: 'execute-api', region: api[1]! };
  const fn = /^[a-z0-9]+\.lambda-url\.([a-z]{2}(?:-[a-z]+)+-\d+)\.on\.aws$/.exec(host);
  if (fn) return { service: 'lambda', region: fn[1]! };
  return undefined;
}

/** Whether and how publishFile signs for `url`: the scope, or undefined for unsigned requests. */
export function signingScopeFor(
  url: string,
  options: { sign?: SignMode; region?: string; service?: string },
  env: NodeJS.ProcessEnv = process.env,
): SigningScope | undefined {
  const mode = options.sign ?? 'auto';
  if (mode === 'never') return undefined;
  const found = awsEndpointOf(url);
  if (mode === 'auto' && !found && options.service === undefined) return undefined;
  const host = new URL(url).host;
  const service = options.service ?? found?.service;
  if (service === undefined) {
    throw new ConfigError('publish service', `execute-api or lambda: the host "${host}" is neither an HTTP API nor a Function URL`, 'nothing');
  }
  const region = options.region ?? found?.region ?? (env.AWS_REGION || env.AWS_DEFAULT_REGION || undefined);
  if (region === undefined) {
    throw new ConfigError('publish region', `an AWS region (the host "${host}" names none, nor do AWS_REGION and AWS_DEFAULT_REGION)`, 'nothing');
  }
  return { service, region };
}

/** Retry-After in milliseconds: delta-seconds or an HTTP date; undefined when absent or unreadable. */
export function parseRetryAfter(value: string | null | undefined, now = Date.now()): number | undefined {
  if (value === null || value === undefined) return undefined;
  const v = value.trim();
  if (/^\d+(?:\.\d+)?$/.test(v)) return Number(v) * 1000;
  const at = Date.parse(v);
  return Number.isFinite(at) ? Math.max(0, at - now) : undefined;
}

interface Line {
  line: number;
  text: string;
}

export async function publishFile(options: PublishOptions): Promise<PublishResult> {
  const parsed = OptionsSchema.safeParse(options);
  if (!parsed.success) {
    const field = String(parsed.error.issues[0]!.path[0] ?? 'options');
    const received = (options as unknown as Record<string, unknown>)?.[field];
    throw new ConfigError(`publish ${field}`, EXPECTED[field] ?? 'valid options', JSON.stringify(received) ?? 'undefined');
  }
  const opts = parsed.data;
  const base = opts.url.endsWith('/') ? opts.url : `${opts.url}/`;
  const endpoint = new URL(`streams/${encodeURIComponent(opts.stream)}/events`, base);

  let totalBytes: number;
  try {
    totalBytes = (await stat(opts.file)).size;
  } catch (err) {
    throw new ConfigError('publish file', 'a readable JSON-lines file', `"${opts.file}" (${(err as NodeJS.ErrnoException).code ?? err})`);
  }

  const scope = signingScopeFor(opts.url, opts);
  // Loaded only to sign: the credential chain is slow to import.
  const signer = scope ? await (await import('./sigv4.ts')).createRequestSigner(scope) : undefined;
  const run = randomUUID();

  const result: PublishResult = { sent: 0, accepted: 0, rejected: [], replayed: [], shed: [] };
  const bar = opts.progress ? await progressBar(opts.stream) : undefined;
  bar?.start(totalBytes, 0, { accepted: 0, rejected: 0 });

  /** Posts one batch; on 413 splits it, because the server's limits may be lower than ours. */
  const post = async (batch: Line[]): Promise<void> => {
    // One key per batch (its lines identify its body within this run): every resend of it carries the same key.
    const key = `${run}:${span(batch)}`;
    const body = batch.map((l) => l.text).join('\n') + '\n';
    const notAccepted = () => `lines ${span(batch)} were not accepted (${result.accepted} events from earlier lines were accepted)`;
    for (let attempt = 0; ; attempt++) {
      const reply = await request(endpoint, body, key, signer, () => `lines ${span(batch)} may not have been accepted (${result.accepted} events from earlier lines were accepted)`);
      if (reply.status === 202 || (reply.status === 400 && Array.isArray(reply.body.rejected))) {
        result.sent += batch.length;
        const accepted = typeof reply.body.accepted === 'number' ? reply.body.accepted : 0;
        const rejected = (reply.body.rejected ?? []) as { index: number; error: string }[];
        const shed = (Array.isArray(reply.body.shed) ? reply.body.shed : []) as { index: number; reason: string }[];
        if (accepted + rejected.length + shed.length !== batch.length) {
          throw new InvariantError(`server answered accepted ${accepted} + rejected ${rejected.length} + shed ${shed.length} for a batch of ${batch.length} events (lines ${span(batch)})`);
        }
        for (const d of shed) {
          const source = batch[d.index];
          if (!source) throw new InvariantError(`server shed index ${d.index}, but the batch has ${batch.length} events (lines ${span(batch)})`);
          result.shed.push({ line: source.line, reason: d.reason });
        }
        result.accepted += accepted;
        if (reply.body.replay === true) result.replayed.push({ lines: span(batch), idempotencyKey: key });
        for (const r of rejected) {
          const source = batch[r.index];
          if (!source) throw new InvariantError(`server rejected index ${r.index}, but the batch has ${batch.length} events (lines ${span(batch)})`);
          result.rejected.push({ line: source.line, error: r.error });
        }
        return;
      }
      if (reply.status === 429) {
        // Nothing of the batch was enqueued.
        const delayMs = retryDelay(reply, attempt, opts.retryBaseMs);
        if (attempt >= opts.retries) {
          throw new BackPressureError(
            delayMs,
            `stream "${opts.stream}" still saturated after ${opts.retries} retries; lines ${span(batch)} were not enqueued ` +
              `(${result.accepted} events from earlier lines were accepted)`,
          );
        }
        await sleep(delayMs);
        continue;
      }
      if (reply.status >= 500) {
        // Perhaps partly enqueued: the resend carries the same Idempotency-Key.
        if (attempt >= opts.retries) {
          const unknown = reply.body.error === 'outcome_unknown' || Array.isArray(reply.body.unconfirmed);
          throw new PublishRefusedError(
            reply.status,
            `POST ${endpoint.href} answered HTTP ${reply.status} ${opts.retries + 1} times (last: ${messageOf(reply.body, 'no message')}); ` +
              (unknown
                ? `some of lines ${span(batch)} may have been enqueued (Idempotency-Key: ${key}); `
                : `lines ${span(batch)} were not accepted; `) +
              `${result.accepted} events from earlier lines were accepted`,
          );
        }
        await sleep(retryDelay(reply, attempt, opts.retryBaseMs));
        continue;
      }
      if (reply.status === 413) {
        if (batch.length > 1) {
          const half = Math.ceil(batch.length / 2);
          await post(batch.slice(0, half));
          await post(batch.slice(half));
        } else {
          result.sent += 1;
          result.rejected.push({ line: batch[0]!.line, error: messageOf(reply.body, 'event too large') });
        }
        return;
      }
      if (reply.status === 409) {
        // Not retried: the same key gets the same answer.
        throw new PublishRefusedError(409, `POST ${endpoint.href} refused lines ${span(batch)} with Idempotency-Key ${key} (HTTP 409 ${String(reply.body.error ?? 'conflict')}): ${messageOf(reply.body, 'no message')}; ${notAccepted()}`);
      }
      if (reply.status === 404 && Array.isArray(reply.body.knownStreams)) {
        const known = (reply.body.knownStreams as string[]).map((s) => `"${s}"`).join(', ') || '(none)';
        throw new InputRejectedError('stream', `one of ${known}`, `"${opts.stream}"`);
      }
      if (reply.status === 403 || reply.status === 401) {
        throw new PublishRefusedError(reply.status, `POST ${endpoint.href} answered HTTP ${reply.status} (${messageOf(reply.body, 'no message')}): ${authAdvice(signer, endpoint)}; ${notAccepted()}`);
      }
      throw new PublishRefusedError(reply.status, `POST ${endpoint.href} answered HTTP ${reply.status}: ${messageOf(reply.body, 'no message')}; ${notAccepted()}`);
    }
  };

  let batch: Line[] = [];
  let batchBytes = 0;
  let readBytes = 0;
  const flush = async () => {
    if (batch.length > 0) await post(batch);
    batch = [];
    batchBytes = 0;
    bar?.update(Math.min(readBytes, totalBytes), { accepted: result.accepted, rejected: result.rejected.length });
  };

  const input = createReadStream(opts.file, { encoding: 'utf8' });
  const lines = createInterface({ input, crlfDelay: Infinity });
  let lineNo = 0;
  try {
    for await (const raw of lines) {
      lineNo++;
      readBytes += Buffer.byteLength(raw) + 1;
      const text = lineNo === 1 ? raw.replace(/^\uFEFF/, '') : raw;
      if (text.trim() === '') continue;
      // Checked here so one bad line cannot make the server refuse its whole batch.
      try {
        JSON.parse(text);
      } catch (err) {
        result.rejected.push({ line: lineNo, error: `malformed JSON: ${(err as Error).message}` });
        continue;
      }
      const size = Buffer.byteLength(text) + 1;
      if (batch.length > 0 && batchBytes + size > opts.maxBatchBytes) await flush();
      batch.push({ line: lineNo, text });
      batchBytes += size;
      if (batch.length >= opts.batchSize) await flush();
    }
    await flush();
    readBytes = totalBytes;
  } finally {
    lines.close();
    input.destroy();
    bar?.update(Math.min(readBytes, totalBytes), { accepted: result.accepted, rejected: result.rejected.length });
    bar?.stop();
  }
  result.rejected.sort((a, b) => a.line - b.line);
  return result;
}

async function progressBar(stream: string) {
  const { default: cliProgress } = await import('cli-progress');
  return new cliProgress.SingleBar(
    { format: `publish ${stream} [{bar}] {percentage}% | {value}/{total} bytes | accepted {accepted} | rejected {rejected}` },
    cliProgress.Presets.shades_classic,
  );
}

/** What a 401/403 means for this request. */
function authAdvice(signer: RequestSigner | undefined, endpoint: URL): string {
  if (!signer) {
    return (
      'the request was not signed; an endpoint with IAM auth needs SigV4 ' +
      (awsEndpointOf(endpoint) ? '(publish with --sign auto or always)' : '(publish with --sign always --region <region> --service <execute-api|lambda>)')
    );
  }
  const { service, region } = signer.scope;
  const action = service === 'lambda' ? 'lambda:InvokeFunctionUrl' : 'execute-api:Invoke';
  return (
    `the endpoint refused the credentials it was signed with (access key ${signer.accessKeyId}, service ${service}, region ${region}, ` +
    `from the default credential chain: AWS_PROFILE, AWS_ACCESS_KEY_ID, ...). Check that these are the intended credentials and that ` +
    `their role or user may call the endpoint (${action}: SluiceJob.grantPublish(role) grants it)`
  );
}

/**
 * How long to wait before resending: at least Retry-After (and the body's retryAfterMs,
 * when it asks for longer), else exponential backoff with jitter.
 */
export function retryDelay(reply: Reply, attempt: number, baseMs: number): number {
  const fromBody = typeof reply.body.retryAfterMs === 'number' && reply.body.retryAfterMs >= 0 ? reply.body.retryAfterMs : undefined;
  const fromHeader = parseRetryAfter(reply.headers.get('retry-after'));
  const asked = fromBody === undefined ? fromHeader : fromHeader === undefined ? fromBody : Math.max(fromBody, fromHeader);
  if (asked !== undefined) return Math.min(asked, MAX_RETRY_DELAY_MS);
  const ceiling = Math.min(baseMs * 2 ** attempt, MAX_BACKOFF_MS);
  return ceiling / 2 + Math.random() * (ceiling / 2);
}

export interface Reply {
  status: number;
  headers: Headers;
  body: Record<string, unknown>;
}

async function request(endpoint: URL, body: string, key: string, signer: RequestSigner | undefined, unsure: () => string): Promise<Reply> {
  let headers: Record<string, string> = { 'content-type': 'application/x-ndjson', 'idempotency-key': key };
  if (signer) headers = await signer.sign({ method: 'POST', url: endpoint, headers, body });
  let res: Response;
  try {
    res = await fetch(endpoint, { method: 'POST', headers, body });
  } catch (err) {
    // Not retried: the embedded endpoint does not deduplicate, so a resend could enqueue the batch twice.
    const cause = (err as { cause?: { message?: string } }).cause?.message ?? (err as Error).message;
    throw new Error(`POST ${endpoint.href} failed (${cause}); ${unsure()}`, { cause: err });
  }
  const text = await res.text();
  let parsed: Record<string, unknown> = {};
  try {
    const value: unknown = JSON.parse(text);
    if (value && typeof value === 'object' && !Array.isArray(value)) parsed = value as Record<string, unknown>;
  } catch {
    parsed = { message: text.slice(0, 200) };
  }
  return { status: res.status, headers: res.headers, body: parsed };
}

function span(batch: Line[]): string {
  const first = batch[0]?.line;
  const last = batch[batch.length - 1]?.line;
  return first === last ? `${first}` : `${first}-${last}`;
}

/** The answer's message: ours and HTTP APIs' say `message`, Function URLs' `Message`. */
function messageOf(body: Record<string, unknown>, fallback: string): string {
  const m = body.message ?? body.Message;
  return typeof m === 'string' && m !== '' ? m : fallback;
}

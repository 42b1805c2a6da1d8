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
 * - Sending, Idempotency-Keys, retries and 413 splits are the ingest client's
 *   (lib/transport/ingest-client.ts, `IngestClient` of `sluice`): every batch carries a key
 *   (`<run>:<lines>`), the same on each resend; 429 is retried after Retry-After, 5xx after
 *   Retry-After or a backoff, at most `retries` times per batch; a batch answered as a
 *   replay (`replay: true`) is counted as that batch's and reported; a 409 fails the publish.
 */
import { randomUUID } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { z } from 'zod';
import { ConfigError } from '../errors.ts';
import { IngestClient } from '../transport/ingest-client.ts';
import type { RequestSigner, SigningScope } from './sigv4.ts';

export { IngestRefusedError as PublishRefusedError, parseRetryAfter, retryDelay, type IngestReply as Reply } from '../transport/ingest-client.ts';

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

  const endpoint = new URL(`streams/${encodeURIComponent(opts.stream)}/events`, opts.url.endsWith('/') ? opts.url : `${opts.url}/`);
  const client = new IngestClient({
    url: opts.url,
    maxEventsPerRequest: opts.batchSize,
    maxBytesPerRequest: opts.maxBatchBytes,
    retries: opts.retries,
    retryBaseMs: opts.retryBaseMs,
    sign: signer && ((request) => signer.sign(request)),
    authHint: () => authAdvice(signer, endpoint),
  });
  /** Posts one batch (the client splits it on a 413) and maps its answers back to file lines. */
  const post = async (batch: Line[]): Promise<void> => {
    const spanOf = (from: number, to: number) => span(batch.slice(from, to + 1));
    const before = result.accepted;
    const sent = await client.sendLines(
      opts.stream,
      batch.map((l) => l.text),
      {
        // One key per batch (its lines identify its body within this run): every resend of it carries the same key.
        idempotencyKey: (from, to) => `${run}:${spanOf(from, to)}`,
        nameBatch: (from, to) => `lines ${spanOf(from, to)}`,
        nameEarlier: (n) => `${before + n} events from earlier lines were accepted`,
      },
    );
    result.sent += sent.sent;
    result.accepted += sent.accepted;
    for (const d of sent.shed) result.shed.push({ line: batch[d.index]!.line, reason: d.reason });
    for (const r of sent.rejected) result.rejected.push({ line: batch[r.index]!.line, error: r.error });
    for (const r of sent.replayed) result.replayed.push({ lines: spanOf(r.from, r.to), idempotencyKey: r.idempotencyKey });
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

function span(batch: Line[]): string {
  const first = batch[0]?.line;
  const last = batch[batch.length - 1]?.line;
  return first === last ? `${first}` : `${first}-${last}`;
}

/**
 * `sluice publish`: stream a JSON-lines file to an ingestion endpoint in
 * batches. The file is read line by line (never whole), batches are posted
 * one at a time so per-key order is the file's order, 429s are retried after
 * Retry-After, and the server's per-event rejections are reported by file line.
 */
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import cliProgress from 'cli-progress';
import { z } from 'zod';
import { BackPressureError, ConfigError, InputRejectedError, InvariantError } from '../errors.ts';

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
  /** How many times one batch is retried after a 429; default 5. */
  retries?: number;
  /** Most body bytes per request, kept under the server's limit; default 1,000,000. */
  maxBatchBytes?: number;
}

export interface PublishResult {
  /** Events posted to the server (malformed lines are not sent). */
  sent: number;
  accepted: number;
  /** Rejected events by 1-based file line, in file order: malformed JSON, or refused by the server. */
  rejected: { line: number; error: string }[];
}

const OptionsSchema = z.object({
  url: z.string().refine((s) => URL.canParse(s) && /^https?:$/.test(new URL(s).protocol)),
  stream: z.string().min(1),
  file: z.string().min(1),
  batchSize: z.number().int().positive().default(500),
  progress: z.boolean().default(false),
  retries: z.number().int().min(0).default(5),
  maxBatchBytes: z.number().int().positive().default(1_000_000),
});

const EXPECTED: Record<string, string> = {
  url: 'an http(s) URL such as http://127.0.0.1:8787',
  stream: 'a non-empty stream name',
  file: 'a path to a JSON-lines file',
  batchSize: 'a positive integer',
  progress: 'true or false',
  retries: 'an integer >= 0',
  maxBatchBytes: 'a positive integer number of bytes',
};

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
  const endpoint = new URL(`streams/${encodeURIComponent(opts.stream)}/events`, base).href;

  let totalBytes: number;
  try {
    totalBytes = (await stat(opts.file)).size;
  } catch (err) {
    throw new ConfigError('publish file', 'a readable JSON-lines file', `"${opts.file}" (${(err as NodeJS.ErrnoException).code ?? err})`);
  }

  const result: PublishResult = { sent: 0, accepted: 0, rejected: [] };
  const bar = opts.progress
    ? new cliProgress.SingleBar(
        { format: `publish ${opts.stream} [{bar}] {percentage}% | {value}/{total} bytes | accepted {accepted} | rejected {rejected}` },
        cliProgress.Presets.shades_classic,
      )
    : undefined;
  bar?.start(totalBytes, 0, { accepted: 0, rejected: 0 });

  /** Posts one batch; on 413 splits it, because the server's limits may be lower than ours. */
  const post = async (batch: Line[]): Promise<void> => {
    for (let attempt = 0; ; attempt++) {
      const reply = await request(endpoint, batch, result.accepted);
      if (reply.status === 202 || (reply.status === 400 && Array.isArray(reply.body.rejected))) {
        result.sent += batch.length;
        const accepted = typeof reply.body.accepted === 'number' ? reply.body.accepted : 0;
        const rejected = (reply.body.rejected ?? []) as { index: number; error: string }[];
        if (accepted + rejected.length !== batch.length) {
          throw new InvariantError(`server answered accepted ${accepted} + rejected ${rejected.length} for a batch of ${batch.length} events (lines ${span(batch)})`);
        }
        result.accepted += accepted;
        for (const r of rejected) {
          const source = batch[r.index];
          if (!source) throw new InvariantError(`server rejected index ${r.index}, but the batch has ${batch.length} events (lines ${span(batch)})`);
          result.rejected.push({ line: source.line, error: r.error });
        }
        return;
      }
      if (reply.status === 429) {
        const headerSeconds = Number(reply.headers.get('retry-after'));
        const delayMs = typeof reply.body.retryAfterMs === 'number'
          ? reply.body.retryAfterMs
          : Number.isFinite(headerSeconds) ? headerSeconds * 1000 : 1000;
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
      if (reply.status === 404 && Array.isArray(reply.body.knownStreams)) {
        const known = (reply.body.knownStreams as string[]).map((s) => `"${s}"`).join(', ') || '(none)';
        throw new InputRejectedError('stream', `one of ${known}`, `"${opts.stream}"`);
      }
      throw new Error(
        `POST ${endpoint} answered HTTP ${reply.status}: ${messageOf(reply.body, 'no message')}; ` +
          `lines ${span(batch)} were not accepted (${result.accepted} events from earlier lines were accepted)`,
      );
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

interface Reply {
  status: number;
  headers: Headers;
  body: Record<string, unknown>;
}

async function request(endpoint: string, batch: Line[], acceptedSoFar: number): Promise<Reply> {
  let res: Response;
  try {
    res = await fetch(endpoint, {
      method: 'POST',
      headers: { 'content-type': 'application/x-ndjson' },
      body: batch.map((l) => l.text).join('\n') + '\n',
    });
  } catch (err) {
    // Not retried: if the request reached the server, a resend could enqueue the batch twice.
    const cause = (err as { cause?: { message?: string } }).cause?.message ?? (err as Error).message;
    throw new Error(
      `POST ${endpoint} failed (${cause}); lines ${span(batch)} may not have been accepted ` +
        `(${acceptedSoFar} events from earlier lines were accepted)`,
      { cause: err },
    );
  }
  const text = await res.text();
  let body: Record<string, unknown> = {};
  try {
    const parsed: unknown = JSON.parse(text);
    if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) body = parsed as Record<string, unknown>;
  } catch {
    body = { message: text.slice(0, 200) };
  }
  return { status: res.status, headers: res.headers, body };
}

function span(batch: Line[]): string {
  const first = batch[0]?.line;
  const last = batch[batch.length - 1]?.line;
  return first === last ? `${first}` : `${first}-${last}`;
}

function messageOf(body: Record<string, unknown>, fallback: string): string {
  return typeof body.message === 'string' ? body.message : fallback;
}

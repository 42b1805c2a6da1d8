/**
 * `--target local-aws` as a user runs it, in child processes:
 * - `sluice run` with no endpoint configured starts DynamoDB Local and fauxqs itself,
 *   writes the embedded runtime's output and ends with the cost line;
 * - `sluice dev` with AWS_ENDPOINT_URL_DYNAMODB/_SQS/_S3 set uses those servers (the
 *   test setup's) and serves the ingest handler behind a local Function URL, which
 *   two requests feed (one per source partition).
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, inject, it } from 'vitest';
import q5 from '../../../examples/nexmark/q5.ts';
import { Sinks, type Sink } from '../../../lib/api/sinks.ts';
import { EmbeddedRuntime } from '../../../lib/local/embedded.ts';
import { generateEvents, serializeEvent } from '../../../lib/nexmark/index.ts';
import { serveJob, sluice, waitFor } from '../../cli/helpers.ts';

/** The environment without any endpoint variable, plus `extra`. */
function childEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const k of Object.keys(env)) if (k.startsWith('AWS_ENDPOINT_URL') || k === 'AWS_IGNORE_CONFIGURED_ENDPOINT_URLS') delete env[k];
  return { ...env, ...extra };
}



describe('sluice --target local-aws', () => {
  it('run: starts its own local servers and writes the embedded output, then the cost line', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-local-aws-cli-'));
    const input = join(dir, 'events.jsonl');
    const output = join(dir, 'hot.jsonl');
    writeFileSync(input, [...generateEvents(0, 1000, { ratePerSec: 100 })].map(serializeEvent).join('\n') + '\n{"type":"bid"}\n');
    const expected = Sinks.collect<unknown>();
    await new EmbeddedRuntime(q5(), { sources: { events: { kind: 'file', path: input } }, sinks: { results: expected as Sink<any> } }).run();

    const res = await sluice(['run', 'examples/nexmark/q5.ts', '--input', input, '--output', output, '--target', 'local-aws'], { env: childEnv(), timeoutMs: 170_000 });
    expect(res.code, res.stderr).toBe(3); // completed, with a rejected input line
    expect(res.stderr).toMatch(/DynamoDB DynamoDB Local at http:\/\/127\.0\.0\.1:\d+; SQS fauxqs at http:\/\/127\.0\.0\.1:\d+/);
    expect(res.stderr).toMatch(/events\.jsonl:1001: dateTime/);
    expect(res.stderr).toMatch(/sluice run nexmark-q5: 1,000 records in, \d+ out .* 1 rejected inputs, 0 dead letters/);
    expect(res.stderr).toMatch(/cost on AWS \(us-east-1 prices as of \d{4}-\d\d\): [\d,]+ Lambda requests .* = \$[\d.]+, \$[\d.]+ per million events\n?$/);
    const got = readFileSync(output, 'utf8').trim().split('\n').sort();
    expect(got).toEqual(expected.records.map((r) => JSON.stringify(r)).sort());
  }, 180_000);

  it('dev: uses the servers the SDK variables name and takes events through the ingest handler', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-local-aws-dev-'));
    const file = join(dir, 'views.jsonl');
    // Published 4 lines per request: the ingest function sends each request to the next source
    // partition, and both see t = 130 s, so event time moves on without waiting for an idle
    // probe (a silent partition counts as idle only after the source's idle timeout).
    const views = [
      { page: '/a', user: 'u1', time: 1_000 },
      { page: '/a', user: 'u2', time: 2_000 },
      { page: '/b', user: 'u1', time: 59_999 },
      { page: '/b', user: 'u2', time: 130_000 },
      { page: '/a', user: 'u3', time: 60_000 },
      { page: '/b', user: 'u3', time: 130_000 },
    ];
    writeFileSync(file, views.map((v) => JSON.stringify(v)).join('\n') + '\n{"page": 1}\n');
    const env = childEnv({
      AWS_ENDPOINT_URL_DYNAMODB: inject('dynamodbEndpoint'),
      AWS_ENDPOINT_URL_SQS: inject('fauxqsEndpoint'),
      AWS_ENDPOINT_URL_S3: inject('fauxqsEndpoint'),
      AWS_REGION: inject('awsRegion'),
      AWS_ACCESS_KEY_ID: inject('awsCredentials').accessKeyId,
      AWS_SECRET_ACCESS_KEY: inject('awsCredentials').secretAccessKey,
    });
    const dev = await serveJob(['dev', 'examples/first-job.ts', '--port', '0', '--target', 'local-aws'], { env, timeoutMs: 60_000 });
    try {
      const { url } = dev;
      expect(dev.stderr()).toContain(`DynamoDB AWS_ENDPOINT_URL_DYNAMODB=${inject('dynamodbEndpoint')}`);
      expect(dev.stderr()).toContain(`SQS AWS_ENDPOINT_URL_SQS=${inject('fauxqsEndpoint')}`);
      // Two requests without an Idempotency-Key, so the ingest function sends them to the two
      // source partitions in turn (`sluice publish` sends a key per batch, which picks the
      // partition by its hash: both batches could land in one partition).
      const lines = readFileSync(file, 'utf8').trim().split('\n');
      const answers = [];
      for (const batch of [lines.slice(0, 4), lines.slice(4)]) {
        const res = await fetch(`${url}/streams/views/events`, { method: 'POST', headers: { 'content-type': 'application/x-ndjson' }, body: batch.join('\n') + '\n' });
        expect(res.status).toBe(202);
        answers.push((await res.json()) as { accepted: number; rejected: { index: number }[] });
      }
      expect(answers.map((a) => a.accepted)).toEqual([4, 2]);
      expect(answers[1].rejected.map((r) => r.index)).toEqual([2]); // the file's seventh line
      // The windows close in two partitions, whose sink writes reach dev.stdout() separately: wait for all three rows.
      await waitFor(() => dev.stdout(), /^(?:.*\n){3}/, 60_000);
      const rows = dev.stdout().trim().split('\n').map((l) => JSON.parse(l));
      expect(rows).toEqual(
        expect.arrayContaining([
          { page: '/a', windowStart: 0, views: 2 },
          { page: '/b', windowStart: 0, views: 1 },
          { page: '/a', windowStart: 60000, views: 1 },
        ]),
      );
      await waitFor(() => dev.stderr(), /invocations\s+messages\s+records\s+failed\s+running\s+busy s\s+partitions\s+needs/, 10_000);
      // Each stage's records (the handlers' recordsIn), busy seconds, partitions and the partitions the input rate so far needs at that cost.
      await waitFor(() => dev.stderr(), /\n {3}\S+\s+[1-9][\d,]*\s+[\d,]+\s+[1-9][\d,]*\s+\d+\s+\d+\s+\d+\.\d\s+\d+\s+[1-9]\d*\n/, 10_000);
    } finally {
      dev.child.kill('SIGINT');
    }
    expect(await dev.exited).toBe(3); // stopped, with a rejected event
    expect(dev.stderr()).toMatch(/stopped: 6 records ingested, 1 rejected, 0 dead letters/);
    expect(dev.stderr()).toMatch(/cost on AWS .* [1-9]\d* HTTP API requests = \$/);
  }, 120_000);
});

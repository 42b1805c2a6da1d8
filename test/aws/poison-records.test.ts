/**
 * Contract 6 on local AWS, as test/local/poison-records.test.ts checks it on the embedded
 * runtime: the seeded poison job (poison-jobs.ts) through the real handlers against
 * DynamoDB Local and fauxqs. Every poison record has exactly one dead letter (parked by
 * the operator handler, drained from the stage DLQs) with its record, error and
 * maxAttempts attempts, nothing is redriven whole, and every other record's output comes
 * out exactly once against the embedded run of the input without the poison records.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { type Sink, Sinks } from '../../lib/api/sinks.ts';
import { localAwsAt } from '../../lib/testing/local-aws/endpoints.ts';
import { LocalAwsRuntime } from '../../lib/testing/local-aws/runner.ts';
import { EmbeddedRuntime } from '../../lib/local/embedded.ts';
import { assertExactlyOnce } from '../../lib/testing/checker.ts';
import { poisonEvents, poisonJob, poisonOperator, writeEvents } from './poison-jobs.ts';
import { expectOneLetterPerPoison } from './poison-letters.ts';

const env = localAwsAt({ dynamodb: inject('dynamodbEndpoint'), sqs: inject('fauxqsEndpoint'), s3: inject('fauxqsEndpoint') }, inject('awsRegion'), inject('awsCredentials'));
afterAll(() => env.close());

const dir = mkdtempSync(join(tmpdir(), 'sluice-poison-aws-'));
const N = 3000;

describe('poison records on local AWS (seeded)', () => {
  for (const seed of [5, 19]) {
    it(`seed ${seed}: each poison record one dead letter, every other record's output exactly once`, async () => {
      const events = poisonEvents(seed, N);
      const ref = Sinks.collect<unknown>();
      await new EmbeddedRuntime(poisonJob(), { sources: { events: { kind: 'items', items: events.filter((e) => poisonOperator(e) === undefined) } }, sinks: { out: ref as Sink<any> } }).run();
      const out = Sinks.collect<unknown>();
      const path = writeEvents(dir, `seed-${seed}.jsonl`, events);
      const run = await new LocalAwsRuntime(poisonJob(), { env, sources: { events: { kind: 'file', path } }, sinks: { out: out as Sink<any> } }).run();
      assertExactlyOnce(ref.records, out.records, { input: events, label: `seed ${seed}` });
      expect(run.deadLetters.filter((d) => d.kind !== 'deadLetter'), 'messages SQS redrove whole').toEqual([]);
      expectOneLetterPerPoison(events, run.deadLetters.flatMap((d) => (d.kind === 'deadLetter' ? [d] : [])), `seed ${seed}`);
    }, 120_000);
  }
});

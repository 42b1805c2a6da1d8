/**
 * `--target assembly` end to end: the repository's CDK app (Nexmark Q5, stdout sink,
 * checkpoints) synthesized once, its exact Lambda bundles run in worker containers
 * against DynamoDB Local and fauxqs behind the IAM-checking proxy.
 *
 * - Over generated Nexmark events, the output lines are those of the embedded runtime
 *   (as a multiset: partitions interleave differently), with no denied call: the roles
 *   CDK synthesized allow every call the bundles make, checkpoints included.
 * - The same assembly with one permission taken out of stage 0's role (sending to the
 *   stage 1 queue) fails the run with AssemblyAccessDeniedError naming the function, the
 *   action and the resource.
 */
import { execFile } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { job } from '../../../examples/nexmark/q5.ts';
import { JsonLinesFileSink, Sinks, type Sink } from '../../../lib/api/sinks.ts';
import { AssemblyAccessDeniedError } from '../../../lib/testing/local-aws/assembly/errors.ts';
import { AssemblyRun } from '../../../lib/testing/local-aws/assembly/run.ts';
import { assemblyStacks } from '../../../lib/testing/local-aws/assembly/template.ts';
import { localAwsAt } from '../../../lib/testing/local-aws/endpoints.ts';
import { EmbeddedRuntime } from '../../../lib/local/embedded.ts';
import { generateEvents, serializeEvent } from '../../../lib/nexmark/index.ts';

const ROOT = resolve(import.meta.dirname, '../../..');
const dir = mkdtempSync(join(tmpdir(), 'sluice-assembly-q5-'));
const ASSEMBLY = join(dir, 'cdk.out');
/** 3,000 Nexmark events at 100 events/s of event time: 30 s, so 10 s windows fire many times. */
const EVENTS = join(dir, 'events.jsonl');
writeFileSync(EVENTS, [...generateEvents(0, 3000, { ratePerSec: 100 })].map(serializeEvent).join('\n') + '\n');

const env = localAwsAt({ dynamodb: inject('dynamodbEndpoint'), sqs: inject('fauxqsEndpoint'), s3: inject('fauxqsEndpoint') }, inject('awsRegion'), inject('awsCredentials'));
const logs: string[] = [];
const log = (line: string) => logs.push(line);

beforeAll(async () => {
  const t0 = performance.now();
  await promisify(execFile)('npx', ['cdk', 'synth', '--quiet', '-o', ASSEMBLY, '-c', 'sluice:nag=false'], { cwd: ROOT, timeout: 150_000, maxBuffer: 64 << 20 });
  console.log(`cdk synth: ${((performance.now() - t0) / 1000).toFixed(1)} s`);
}, 160_000);

afterAll(async () => {
  await env.close();
  rmSync(dir, { recursive: true, force: true });
});

const lines = (path: string) => readFileSync(path, 'utf8').split('\n').filter(Boolean).sort();

describe('a synthesized assembly run locally', () => {
  it('Q5 through the bundles gives the embedded runtime\'s output, with no call denied', async () => {
    const embedded = Sinks.collect<unknown>();
    await new EmbeddedRuntime(job, { sources: { events: { kind: 'file', path: EVENTS } }, sinks: { results: embedded as Sink<any> } }).run();
    const expected = embedded.records.map((r) => JSON.stringify(r)).sort();
    expect(expected.length).toBeGreaterThan(10);

    const output = join(dir, 'results.jsonl');
    const t0 = performance.now();
    const run = new AssemblyRun({ assemblyDir: ASSEMBLY, job, source: 'events', inputPath: EVENTS, sink: 'results', output: new JsonLinesFileSink(output), log, env });
    const result = await run.run();
    console.log(`assembly run: ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    expect(run.deniedCalls).toEqual([]);
    expect(result.sourceRecords).toBe(3000);
    expect(run.rejectedInputs).toEqual([]);
    expect(run.deadLetters).toEqual([]);
    expect(lines(output)).toEqual(expected);
    // The bundles ran in their own containers, the coordinator included, and the stage functions logged through Powertools.
    expect(run.model!.functions.size).toBe(5);
    expect([...run.logs.keys()].length).toBeGreaterThan(0);
  }, 180_000);

  it('a permission taken out of a role fails the run, naming the function, the action and the resource', async () => {
    const doctored = join(dir, 'doctored');
    cpSync(ASSEMBLY, doctored, { recursive: true });
    const [{ templateFile }] = assemblyStacks(doctored);
    const template = JSON.parse(readFileSync(templateFile, 'utf8')) as { Resources: Record<string, { Type: string; Properties: any }> };
    const res = Object.entries(template.Resources);
    const queue = res.find(([, r]) => r.Type === 'AWS::SQS::Queue' && r.Properties.QueueName === 'nexmark-q5-s1.fifo')![0];
    const sourceQueue = res.find(([, r]) => r.Type === 'AWS::SQS::Queue' && r.Properties.QueueName === 'nexmark-q5-s0.fifo')![0];
    const stage0 = res.find(([, r]) => r.Type === 'AWS::Lambda::EventSourceMapping' && r.Properties.EventSourceArn['Fn::GetAtt'][0] === sourceQueue)![1].Properties.FunctionName.Ref as string;
    let removed = 0;
    for (const [, r] of res) {
      if (r.Type !== 'AWS::IAM::Policy') continue;
      for (const s of r.Properties.PolicyDocument.Statement as { Action: string | string[]; Resource: unknown }[]) {
        if (!JSON.stringify(s.Resource).includes(`"${queue}"`) || !JSON.stringify(s.Action).includes('sqs:SendMessage')) continue;
        s.Action = ([] as string[]).concat(s.Action).filter((a) => a !== 'sqs:SendMessage');
        removed++;
      }
    }
    expect(removed).toBe(1);
    writeFileSync(templateFile, JSON.stringify(template));

    const run = new AssemblyRun({ assemblyDir: doctored, job, source: 'events', inputPath: EVENTS, sink: 'results', output: Sinks.collect<unknown>() as Sink<any>, log, env });
    const error = await run.run().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(AssemblyAccessDeniedError);
    const resource = `arn:aws:sqs:${inject('awsRegion')}:000000000000:nexmark-q5-s1.fifo`;
    expect((error as AssemblyAccessDeniedError).denied).toMatchObject({ function: stage0, action: 'sqs:SendMessage', resource, reason: 'no statement allows it' });
    expect((error as Error).message).toMatch(new RegExp(`^function ${stage0} called sqs:SendMessage on ${resource.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: denied by its role's policies \\(no statement allows it\\)`));
    expect(run.deniedCalls.every((d) => d.function === stage0 && d.action === 'sqs:SendMessage')).toBe(true);
  }, 180_000);
});

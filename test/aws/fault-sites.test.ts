/**
 * Every external call on the AWS path is covered by a named fault site of the one list
 * (lib/util/fault-sites.ts). A local-AWS run with checkpoints, killed-and-resumed in place
 * (restore reads, log replay) and with a dead letter, records every SDK command its
 * handlers, event source mappings and coordinator steps send; each must map to a site,
 * and the crossing middleware the CLI installs (lib/testing/local-aws/fault-sites.ts) must cross
 * that site before and after each call. A command outside the list crosses
 * `aws.uncovered`, which fails this test.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ListQueuesCommand, type SQSClient } from '@aws-sdk/client-sqs';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { localAwsAt } from '../../lib/testing/local-aws/endpoints.ts';
import { crossFaultSites } from '../../lib/testing/local-aws/fault-sites.ts';
import { LocalAwsRuntime } from '../../lib/testing/local-aws/runner.ts';
import { CommittedFileSink } from '../../lib/local/committed-sink.ts';
import { countCrossings, FAULT_SITES, faultCrossings, faultPoints, parseKillSpec, siteOfCommand } from '../../lib/util/fault-sites.ts';
import { countsJob, eventsFile } from './checkpoint-jobs.ts';

const env = localAwsAt({ dynamodb: inject('dynamodbEndpoint'), sqs: inject('fauxqsEndpoint'), s3: inject('fauxqsEndpoint') }, inject('awsRegion'), inject('awsCredentials'));
const dir = mkdtempSync(join(tmpdir(), 'sluice-fault-sites-'));
afterAll(() => {
  countCrossings(false);
  return env.close();
});

/** Every command the clients send, counted (outermost middleware: before the crossing one). */
const sent = new Map<string, number>();
for (const client of Object.values(env.clients)) {
  (client.middlewareStack as SQSClient['middlewareStack']).add(
    (next, context) => (args) => {
      const name = context.commandName ?? '(unnamed)';
      sent.set(name, (sent.get(name) ?? 0) + 1);
      return next(args);
    },
    { step: 'initialize', name: 'observeCommands', priority: 'high' },
  );
}
crossFaultSites(env.clients);

describe('fault sites cover every AWS call', () => {
  it('the list names each site once, and each AWS command once', () => {
    const names = FAULT_SITES.map((s) => s.name);
    expect(new Set(names).size).toBe(names.length);
    const commands = FAULT_SITES.flatMap((s) => s.commands ?? []);
    expect(new Set(commands).size).toBe(commands.length);
    for (const s of FAULT_SITES) expect(s.runtime === 'aws', s.name).toBe((s.commands?.length ?? 0) > 0);
    expect(parseKillSpec('aws.commit:after#3')).toEqual({ point: 'aws.commit:after', nth: 3 });
    expect(() => parseKillSpec('aws.commit#0')).toThrow(/SLUICE_KILL_AT: expected <point>#<n> \(n >= 1\).*received "aws.commit#0"/);
    expect(() => parseKillSpec('commit:after#1')).toThrow(/one of .*batch\.commit\.before/);
  });

  it('a checkpointed local-AWS run, then its resume in place, sends only commands a site covers, each crossed before and after', async () => {
    countCrossings(true);
    const input = eventsFile(dir, 'events.jsonl', 1500);
    const ck = join(dir, 'ck');
    const out = join(dir, 'out.jsonl');
    for (const start of ['fresh', 'resume'] as const) {
      const sink = new CommittedFileSink<unknown>(out, join(ck, 'sinks', 'out'), false);
      const runtime = new LocalAwsRuntime(countsJob(), {
        env,
        sources: { events: { kind: 'file', path: input } },
        sinks: { out: sink },
        chunkSize: 300,
        checkpoints: { dir: ck, intervalMs: 100, start, sinks: [sink] },
      });
      await runtime.run();
    }
    const uncovered = [...sent.keys()].filter((c) => siteOfCommand(c) === undefined);
    expect(uncovered, 'SDK commands no fault site covers: add each to a site in lib/util/fault-sites.ts').toEqual([]);
    const crossings = faultCrossings();
    expect(crossings.get('aws.uncovered:before') ?? 0).toBe(0);
    for (const [command, n] of sent) {
      const site = siteOfCommand(command)!.name;
      expect(crossings.get(`${site}:before`) ?? 0, `${command} before`).toBeGreaterThanOrEqual(n);
      expect(crossings.get(`${site}:after`) ?? 0, `${command} after`).toBeGreaterThan(0);
    }
    // Not vacuous: the run went through commits, deliveries, deletes, snapshots, control writes and restore reads.
    for (const c of ['TransactWriteItemsCommand', 'SendMessageBatchCommand', 'DeleteMessageBatchCommand', 'ReceiveMessageCommand', 'PutObjectCommand', 'PutItemCommand', 'GetObjectCommand']) {
      expect(sent.get(c) ?? 0, c).toBeGreaterThan(0);
    }
    const aws = faultPoints('aws');
    const crossed = aws.filter((p) => (crossings.get(p) ?? 0) > 0);
    expect(crossed.length).toBeGreaterThanOrEqual(aws.length - 4);
  }, 240_000);

  it('a command outside the list crosses aws.uncovered (what the check above fails on)', async () => {
    countCrossings(true);
    expect(siteOfCommand('ListQueueTagsCommand')).toBeUndefined();
    await env.clients.sqs.send(new ListQueuesCommand({}));
    expect(faultCrossings().get('aws.setup:before')).toBe(1);
    const { ListQueueTagsCommand, CreateQueueCommand } = await import('@aws-sdk/client-sqs');
    const { QueueUrl } = await env.clients.sqs.send(new CreateQueueCommand({ QueueName: `fault-sites-${Date.now()}` }));
    await env.clients.sqs.send(new ListQueueTagsCommand({ QueueUrl })).catch(() => undefined);
    expect(faultCrossings().get('aws.uncovered:before')).toBe(1);
  });
});

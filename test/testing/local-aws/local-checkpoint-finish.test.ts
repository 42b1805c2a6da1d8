/**
 * The final checkpoint of a bounded local-AWS run (LocalAwsCheckpointing.finish): it
 * touches the activity item after the drain, then waits for an epoch that covers it. The
 * coordinator keeps opening epochs on its interval meanwhile, so one may open, see the touch and
 * commit while the touch's answer is still on its way. That epoch covers the activity
 * (the coordinator opens no other), and the run must take it as the final one rather than
 * wait forever for an epoch it will never open. The race is made certain here: the touch's
 * answer is held back (SDK middleware on the real DynamoDB Local request) until the
 * coordinator's lease says an epoch opened after the touch has committed. And a state
 * machine that already failed makes finish() throw its failure rather than wait for an epoch.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FinalizeRequestHandlerOptions, FinalizeRequestMiddleware } from '@smithy/types';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { DynamoDbPointerStore } from '../../../lib/aws/dynamodb/dynamodb-pointers.ts';
import type { CheckpointHandler } from '../../../lib/aws/checkpoint/checkpoint-handler.ts';
import { INITIAL_CARRY, LEASE_NAME, type Lease } from '../../../lib/aws/checkpoint/checkpoint-task.ts';
import { LocalCheckpointStateMachine } from '../../../lib/testing/local-aws/checkpoint-state-machine.ts';
import { localAwsAt } from '../../../lib/testing/local-aws/endpoints.ts';
import { LocalAwsRuntime } from '../../../lib/testing/local-aws/runner.ts';
import { countsJob } from '../../aws/checkpoint-jobs.ts';
import { localClients } from '../../aws/helpers.ts';

const env = localAwsAt({ dynamodb: inject('dynamodbEndpoint'), sqs: inject('fauxqsEndpoint'), s3: inject('fauxqsEndpoint') }, inject('awsRegion'), inject('awsCredentials'));
const observer = localClients();
afterAll(async () => {
  await env.close();
  Object.values(observer).forEach((c) => c.destroy());
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The `:at` of an UpdateItem on the activity item (checkpoint-acks.ts touch), or undefined for any other request. */
function activityTouch(request: unknown): number | undefined {
  const r = request as { headers?: Record<string, string>; body?: unknown };
  const target = Object.entries(r.headers ?? {}).find(([k]) => k.toLowerCase() === 'x-amz-target')?.[1];
  if (!target?.endsWith('.UpdateItem')) return undefined;
  const body = JSON.parse(typeof r.body === 'string' ? r.body : Buffer.from(r.body as Uint8Array).toString('utf8')) as { Key?: { sk?: { S?: string } }; ExpressionAttributeValues?: { ':at'?: { N?: string } } };
  return body.Key?.sk?.S === 'activity' ? Number(body.ExpressionAttributeValues?.[':at']?.N) : undefined;
}

describe('local-AWS final checkpoint', () => {
  it('an epoch that opened while the final touch was answered counts as the final one', async () => {
    let hold = false;
    let held = 0;
    const holdTouch: FinalizeRequestMiddleware<any, any> = (next) => async (args) => {
      const at = activityTouch(args.request);
      const out = await next(args);
      if (hold && at !== undefined) {
        held++;
        // The write has landed: wait (as a slow answer would) until an epoch opened after it has committed.
        const pointers = new DynamoDbPointerStore({ client: observer.dynamodb, tableName: runtime.checkpointing!.tableName, job: 'finish' });
        for (let i = 0; ((await pointers.read<Lease>(LEASE_NAME))?.value.coveredFrom ?? 0) <= at; i++) {
          if (i > 600) throw new Error('no epoch covered the touch');
          await sleep(50);
        }
      }
      return out;
    };
    // Before the runtime exists: its document clients copy the client's middleware when they are made.
    env.clients.dynamodb.middlewareStack.add(holdTouch, { step: 'finalizeRequest', name: 'holdActivityTouch' } as FinalizeRequestHandlerOptions);
    const runtime = new LocalAwsRuntime(countsJob({ name: 'finish' }), { env, checkpoints: { dir: mkdtempSync(join(tmpdir(), 'sluice-local-finish-')), intervalMs: 20, start: 'fresh' } });
    try {
      await runtime.start();
      const committedBefore = runtime.checkpointing!.loop.committed.length;
      hold = true;
      const finished = runtime.checkpointing!.finish().then(() => 'finished' as const);
      // Generous: finish() needs one more read of the lease once the touch is answered.
      const outcome = await Promise.race([finished, sleep(60_000).then(() => 'stalled' as const)]);
      expect(held).toBe(1);
      expect(outcome).toBe('finished');
      expect(runtime.checkpointing!.loop.committed.length).toBeGreaterThan(committedBefore);
    } finally {
      hold = false;
      env.clients.dynamodb.middlewareStack.remove('holdActivityTouch');
      await runtime.stop();
    }
  }, 120_000);

  it('a state machine that failed before finish() makes finish() throw its failure instead of waiting', async () => {
    // A coordinator whose every step after the resume fails (its table gone, say): the execution fails, with that failure.
    const handler = (async (event: { action: string }) => {
      if (event.action === 'resume' && !failing) return INITIAL_CARRY;
      throw new Error(`step ${event.action}: the coordinator's table is gone`);
    }) as unknown as CheckpointHandler;
    let failing = false;
    const log: string[] = [];
    const loop = new LocalCheckpointStateMachine({ handler, pointers: { read: async () => undefined }, intervalMs: 5, pollMs: 5, epochTimeoutMs: 1000, execution: 'gone', log: (l) => log.push(l) });
    await loop.start();
    failing = true;
    for (let i = 0; !loop.describe().startsWith('checkpoint loop ended'); i++) {
      if (i > 200) throw new Error(`the executions did not end: ${loop.describe()}`);
      await sleep(20);
    }
    const outcome = await Promise.race([loop.finish().then(() => 'finished', (e: Error) => e.message), sleep(10_000).then(() => 'stalled')]);
    expect(outcome).toBe("step resume: the coordinator's table is gone");
    expect(log).toEqual(["checkpoint open failed: step open: the coordinator's table is gone"]);
  });
});

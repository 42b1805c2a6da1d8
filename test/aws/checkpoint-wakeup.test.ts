/**
 * The ingest path wakes the checkpoint coordinator (lib/aws/checkpoint/checkpoint-wakeup.ts) against
 * DynamoDB Local (activity and lease items) and a loopback Step Functions endpoint that
 * speaks StartExecution's JSON protocol (no local Step Functions server exists; this one
 * refuses a second execution of the same name with ExecutionAlreadyExists, as AWS does):
 * one touch, one lease read and at most one StartExecution per container and time slot,
 * nothing while an execution holds the lease, a duplicate name counted as success, and
 * the ingest handler answering 202 whether or not the wake-up worked.
 */
import type { SFNClient } from '@aws-sdk/client-sfn';
import { type LoopbackStepFunctions, loopbackStepFunctions } from './loopback-sfn.ts';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { ManualClock } from '../../lib/api/types.ts';
import { AwsAccounting } from '../../lib/aws/cost/accounting.ts';
import { DynamoDbAckStore } from '../../lib/aws/checkpoint/checkpoint-acks.ts';
import { LEASE_NAME, type Lease } from '../../lib/aws/checkpoint/checkpoint-task.ts';
import { CoordinatorWakeUp, wakeUpExecutionName } from '../../lib/aws/checkpoint/checkpoint-wakeup.ts';
import { DynamoDbPointerStore } from '../../lib/aws/dynamodb/dynamodb-pointers.ts';
import { createStateTable } from '../../lib/aws/dynamodb/dynamodb-table.ts';
import { apiEvent } from '../../lib/testing/local-aws/feeder.ts';
import { createIngestHandler } from '../../lib/aws/ingest/ingest-handler.ts';
import { estimateCost } from '../../lib/aws/cost/prices.ts';
import { createStageQueues, StaticQueues } from '../../lib/aws/sqs/sqs-queues.ts';
import { compile } from '../../lib/graph/compile.ts';
import { localClients, unique } from './helpers.ts';

const clients = localClients();
const ARN = 'arn:aws:states:us-east-1:123456789012:stateMachine:sluice-checkpoints';
const GRAIN = 10_000;

/** StartExecution requests received (name, input), and names already taken. */
const started: { name: string; input: string }[] = [];
let stepFunctions: LoopbackStepFunctions;
let sfn: SFNClient;

beforeAll(async () => {
  stepFunctions = await loopbackStepFunctions((op, input) => {
    if (op !== 'StartExecution' || input.stateMachineArn !== ARN) return { error: 'InvalidArn', message: `unexpected ${op} on ${input.stateMachineArn}` };
    if (started.some((s) => s.name === input.name)) return { error: 'ExecutionAlreadyExists', message: `Execution Already Exists: '${input.name}'` };
    started.push({ name: input.name, input: input.input });
    return { result: { executionArn: `${ARN.replace(':stateMachine:', ':execution:')}:${input.name}`, startDate: Date.now() / 1000 } };
  });
  sfn = stepFunctions.sfn;
});
afterAll(async () => {
  await stepFunctions.close();
  for (const c of Object.values(clients)) c.destroy();
});

async function world(job: string) {
  const tableName = unique('sluice-wake');
  await createStateTable(clients.dynamodb, tableName);
  const accounting = new AwsAccounting();
  const clock = new ManualClock(1_700_000_000_000);
  const activity = new DynamoDbAckStore({ client: clients.dynamodb, tableName, job, accounting });
  const pointers = new DynamoDbPointerStore({ client: clients.dynamodb, tableName, job, accounting });
  const container = () => new CoordinatorWakeUp({ job, sfn, stateMachineArn: ARN, activity, pointers, grainMs: GRAIN, accounting, clock });
  return { tableName, accounting, clock, activity, pointers, container };
}

describe('CoordinatorWakeUp', () => {
  it('touches, checks the lease and starts at most one execution per container and slot; a duplicate name is success', async () => {
    const job = unique('wake');
    const w = await world(job);
    const a = w.container();
    expect(await a.onInput()).toEqual({ touched: true, execution: 'started' });
    expect(w.accounting.totals('dynamodb').requests).toBe(2); // one UpdateItem (touch), one GetItem (lease)
    const slot = Math.floor(w.clock.now() / GRAIN);
    expect(started.filter((s) => s.name.startsWith(job))).toEqual([{ name: wakeUpExecutionName(job, slot), input: '{}' }]);
    expect(await w.activity.lastActivity()).toBe(w.clock.now());
    // Later requests in the slot cost nothing.
    w.clock.advance(100);
    const before = w.accounting.totals('dynamodb').requests;
    for (let i = 0; i < 5; i++) expect(await a.onInput()).toEqual({ touched: false, execution: 'skipped' });
    expect(w.accounting.totals('dynamodb').requests).toBe(before);
    // Another container in the same slot: the name is taken, which means the coordinator runs.
    expect(await w.container().onInput()).toEqual({ touched: true, execution: 'exists' });
    expect(started.filter((s) => s.name.startsWith(job))).toHaveLength(1);
    // Accounting: two requests, one execution started; a refused duplicate costs no transition.
    expect(w.accounting.get('stepfunctions', 'StartExecution')).toMatchObject({ requests: 2, items: 1, errors: 1 });
    expect(estimateCost(w.accounting).lines.find((l) => l.service === 'stepfunctions')!.quantity).toBe(1);
    // The next slot: touched again (monotonic), looked at again.
    w.clock.advance(GRAIN);
    expect(await a.onInput()).toEqual({ touched: true, execution: 'started' });
    expect(await w.activity.lastActivity()).toBe(w.clock.now());
  });

  it('starts nothing while an execution holds the lease, and starts once it expired or was released', async () => {
    const job = unique('wake');
    const w = await world(job);
    const lease: Lease = { owner: 'exec-1', until: w.clock.now() + 60_000, coveredFrom: 0 };
    expect(await w.pointers.compareAndSet(LEASE_NAME, 0, lease)).toBe(true);
    const a = w.container();
    expect(await a.onInput()).toEqual({ touched: true, execution: 'running' });
    expect(started.some((s) => s.name.startsWith(job))).toBe(false);
    // Released (the execution ended idle): the next slot starts one.
    expect(await w.pointers.compareAndSet(LEASE_NAME, 1, { ...lease, owner: null, until: 0 })).toBe(true);
    w.clock.advance(GRAIN);
    expect(await a.onInput()).toEqual({ touched: true, execution: 'started' });
  });

  it('is called by the ingest handler after input was enqueued; a failing wake-up never fails the request', async () => {
    const job = new Job(unique('wake-ingest'), { parallelism: 1 });
    job.ingest<{ n: number }>('events').sinkTo(Sinks.collect(), 'out');
    const plan = compile(job.graph);
    const queues = new StaticQueues(await createStageQueues(clients.sqs, plan, { prefix: `${unique('w')}-` }));
    const w = await world(plan.job.name);
    let calls = 0;
    const handler = createIngestHandler({ job, sqs: clients.sqs, queues, wakeUp: { onInput: () => (calls++, w.container().onInput()) } });
    const res = await handler(apiEvent('events', JSON.stringify([{ n: 1 }, { n: 2 }])));
    expect(res.statusCode).toBe(202);
    expect(calls).toBe(1);
    expect(started.some((s) => s.name.startsWith(plan.job.name.replace(/[^A-Za-z0-9_-]/g, '_')))).toBe(true);
    // Nothing accepted: nothing to wake for.
    expect((await handler(apiEvent('events', 'not json'))).statusCode).toBe(400);
    expect(calls).toBe(1);
    const failing = createIngestHandler({ job, sqs: clients.sqs, queues, wakeUp: { onInput: () => Promise.reject(new Error('throttled')) } });
    expect((await failing(apiEvent('events', JSON.stringify([{ n: 3 }])))).statusCode).toBe(202);
  });
});

/**
 * Stopping and starting a deployed job around a restore (lib/aws/restore/job-control.ts) through
 * AwsJobControlPort: the stage queues on fauxqs (a batch received by an "invocation" is in
 * flight until deleted), the coordinator's lease on DynamoDB Local, the Lambda API
 * (event source mappings, with their Disabling -> Disabled transition) through
 * aws-sdk-client-mock, and Step Functions through a loopback endpoint speaking its JSON
 * protocol (no local server exists for either). Time is a fake clock advanced by the
 * injected sleep, so waits are counted, never timed.
 */
import { GetEventSourceMappingCommand, LambdaClient, ListEventSourceMappingsCommand, UpdateEventSourceMappingCommand } from '@aws-sdk/client-lambda';
import type { SFNClient } from '@aws-sdk/client-sfn';
import { type LoopbackStepFunctions, loopbackStepFunctions } from './loopback-sfn.ts';
import { DeleteMessageCommand, SendMessageCommand } from '@aws-sdk/client-sqs';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { AwsAccounting } from '../../lib/aws/cost/accounting.ts';
import { acquireLease, LEASE_NAME, type Lease } from '../../lib/aws/checkpoint/checkpoint-task.ts';
import { CoordinatorWakeUp } from '../../lib/aws/checkpoint/checkpoint-wakeup.ts';
import { DynamoDbPointerStore } from '../../lib/aws/dynamodb/dynamodb-pointers.ts';
import { createStateTable } from '../../lib/aws/dynamodb/dynamodb-table.ts';
import { AwsJobControlPort, CoordinatorLeaseError, JobControl, JobControlTimeoutError, restoreLeaseOwner, whileStopped } from '../../lib/aws/restore/job-control.ts';
import { createStageQueues } from '../../lib/aws/sqs/sqs-queues.ts';
import { compile } from '../../lib/graph/compile.ts';
import { localClients, receive, unique } from './helpers.ts';

const clients = localClients();
const MACHINE = 'arn:aws:states:us-east-1:123456789012:stateMachine:sluice-ck';

/** Step Functions executions by ARN, and every call in order. */
const executions = new Map<string, { name: string; status: string }>();
const calls: string[] = [];
let stepFunctions: LoopbackStepFunctions;
let sfn: SFNClient;

beforeAll(async () => {
  stepFunctions = await loopbackStepFunctions((op, input) => {
    calls.push(`sfn:${op}`);
    if (op === 'ListExecutions') {
      if (input.stateMachineArn !== MACHINE) return { error: 'StateMachineDoesNotExist' };
      const list = [...executions].filter(([, e]) => !input.statusFilter || e.status === input.statusFilter);
      return { result: { executions: list.map(([arn, e]) => ({ executionArn: arn, stateMachineArn: MACHINE, name: e.name, status: e.status, startDate: 0 })) } };
    }
    if (op === 'StopExecution') {
      const e = executions.get(input.executionArn);
      if (!e) return { error: 'ExecutionDoesNotExist' };
      e.status = 'ABORTED';
      return { result: { stopDate: Date.now() / 1000 } };
    }
    if (op === 'StartExecution') {
      const arn = `${MACHINE.replace(':stateMachine:', ':execution:')}:${input.name}`;
      if (executions.has(arn)) return { error: 'ExecutionAlreadyExists' };
      executions.set(arn, { name: input.name, status: 'RUNNING' });
      return { result: { executionArn: arn, startDate: Date.now() / 1000 } };
    }
    return { error: 'UnknownOperation' };
  });
  sfn = stepFunctions.sfn;
});
afterAll(async () => {
  await stepFunctions.close();
  for (const c of Object.values(clients)) c.destroy();
});

function twoStageJob(name: string): Job {
  const job = new Job(name, { parallelism: 2, maxParallelism: 8 });
  job
    .ingest<{ k: string }>('in', { timestamp: () => 0 })
    .keyBy((e) => e.k)
    .process({ processElement: (e, ctx) => ctx.emit(e) })
    .name('p')
    .sinkTo(Sinks.stdout(), 'out');
  return job;
}

async function world(o: { timeoutMs?: number; onSleep?: (n: number) => Promise<void> | void } = {}) {
  const job = unique('jc');
  const plan = compile(twoStageJob(job).graph);
  const tableName = unique('sluice-jc');
  await createStateTable(clients.dynamodb, tableName);
  const queues = (await createStageQueues(clients.sqs, plan, { prefix: `${unique('q')}-`, visibilityTimeoutSeconds: 300 })).map((q, stage) => ({ stage, url: q.url, arn: q.arn }));
  const pointers = new DynamoDbPointerStore({ client: clients.dynamodb, tableName, job });
  // The Lambda API: one mapping per stage queue; stage 1's was disabled by hand before.
  const lambda = new LambdaClient({ region: inject('awsRegion'), credentials: inject('awsCredentials') });
  const mock = mockClient(lambda);
  const mappings = new Map(queues.map((q) => [`uuid-${q.stage}`, { arn: q.arn, state: q.stage === 1 ? 'Disabled' : 'Enabled', reads: 0 }]));
  mock.on(ListEventSourceMappingsCommand).callsFake((input: { EventSourceArn: string }) => {
    calls.push('lambda:ListEventSourceMappings');
    return { EventSourceMappings: [...mappings].filter(([, m]) => m.arn === input.EventSourceArn).map(([uuid, m]) => ({ UUID: uuid, EventSourceArn: m.arn, FunctionArn: `fn-${uuid}`, State: m.state })) };
  });
  mock.on(UpdateEventSourceMappingCommand).callsFake((input: { UUID: string; Enabled: boolean }) => {
    calls.push(`lambda:Update ${input.UUID} ${input.Enabled}`);
    const m = mappings.get(input.UUID)!;
    m.state = input.Enabled ? 'Enabling' : 'Disabling';
    m.reads = 0;
    return { UUID: input.UUID, State: m.state };
  });
  mock.on(GetEventSourceMappingCommand).callsFake((input: { UUID: string }) => {
    const m = mappings.get(input.UUID)!;
    // Lambda takes a look or two to finish the transition.
    if (++m.reads >= 2 && m.state === 'Disabling') m.state = 'Disabled';
    if (m.reads >= 2 && m.state === 'Enabling') m.state = 'Enabled';
    return { UUID: input.UUID, State: m.state };
  });
  let now = 1_700_000_000_000;
  let sleeps = 0;
  const port = new AwsJobControlPort({ lambda, sqs: clients.sqs, sfn, stateMachineArn: MACHINE });
  const owner = restoreLeaseOwner(now);
  const control = new JobControl({
    job,
    port,
    pointers,
    queues,
    owner,
    pollMs: 1000,
    timeoutMs: o.timeoutMs ?? 60_000,
    now: () => now,
    sleep: async (ms) => {
      now += ms;
      await o.onSleep?.(++sleeps);
    },
  });
  return { job, queues, pointers, mappings, control, owner, lambda, now: () => now };
}

describe('stopping and starting a deployed job around a restore', () => {
  it('takes the lease, stops the coordinator, disables the consumers and waits for in-flight batches; start undoes it', async () => {
    calls.length = 0;
    let inFlight: { url: string; handle: string } | undefined;
    const w = await world({
      // The invocation holding a batch finishes during the wait.
      onSleep: async () => {
        if (inFlight && calls.includes('sqs:waited')) {
          await clients.sqs.send(new DeleteMessageCommand({ QueueUrl: inFlight.url, ReceiptHandle: inFlight.handle }));
          inFlight = undefined;
        }
      },
    });
    // A coordinator execution holds the lease; an invocation holds a batch of stage 0.
    executions.set(`${MACHINE}:exec-1`.replace(':stateMachine:', ':execution:'), { name: 'exec-1', status: 'RUNNING' });
    expect((await acquireLease(w.pointers, 'exec-1', null, w.now(), 600_000)).ok).toBe(true);
    await clients.sqs.send(new SendMessageCommand({ QueueUrl: w.queues[0].url, MessageBody: '{}', MessageGroupId: '0', MessageDeduplicationId: 'm1' }));
    const [m] = await receive(clients.sqs, w.queues[0].url);
    inFlight = { url: w.queues[0].url, handle: m.ReceiptHandle! };
    const port = new AwsJobControlPort({ lambda: w.lambda, sqs: clients.sqs, sfn, stateMachineArn: MACHINE });
    expect(await port.inFlight(w.queues[0].url)).toBe(1);
    calls.push('sqs:waited');

    const stopped = await w.control.stop();
    expect(inFlight).toBeUndefined();
    expect(await port.inFlight(w.queues[0].url)).toBe(0);
    expect(stopped.disabled.map((c) => c.uuid)).toEqual(['uuid-0']);
    expect(stopped.stoppedExecutions).toEqual([`${MACHINE.replace(':stateMachine:', ':execution:')}:exec-1`]);
    expect([...w.mappings.values()].map((m) => m.state)).toEqual(['Disabled', 'Disabled']);
    expect([...executions.values()].filter((e) => e.status === 'RUNNING')).toEqual([]);
    const order = calls.filter((c) => /StopExecution|Update/.test(c));
    expect(order).toEqual(['sfn:StopExecution', 'lambda:Update uuid-0 false']);
    // While stopped: the execution cannot take its lease back, the ingest wake-up starts nothing.
    expect((await acquireLease(w.pointers, 'exec-1', null, w.now(), 600_000)).ok).toBe(false);
    const wake = new CoordinatorWakeUp({ job: w.job, sfn, stateMachineArn: MACHINE, activity: { touch: async () => undefined }, pointers: w.pointers, grainMs: 10_000, accounting: new AwsAccounting(), clock: { now: w.now } });
    expect((await wake.onInput()).execution).toBe('running');
    // A second restore is refused while this one holds the lease.
    const other = new JobControl({ job: w.job, port, pointers: w.pointers, queues: w.queues, owner: restoreLeaseOwner(w.now() + 1), now: w.now });
    await expect(other.stop()).rejects.toBeInstanceOf(CoordinatorLeaseError);

    calls.length = 0;
    await w.control.start(stopped);
    // Only the mapping that was enabled comes back; the lease is free; one execution resumes the coordinator.
    expect(calls.filter((c) => c.startsWith('lambda:Update'))).toEqual(['lambda:Update uuid-0 true']);
    expect((await w.pointers.read<Lease>(LEASE_NAME))?.value).toMatchObject({ owner: null, until: 0 });
    const running = [...executions.values()].filter((e) => e.status === 'RUNNING');
    expect(running.map((e) => e.name)).toEqual([expect.stringMatching(new RegExp(`^${w.job}-restore-\\d+$`))]);
    running[0].status = 'SUCCEEDED';
  });

  it('gives up with a retryable JobControlTimeoutError when a batch stays in flight, and a failed restore leaves the job stopped', async () => {
    const w = await world({ timeoutMs: 5_000 });
    await clients.sqs.send(new SendMessageCommand({ QueueUrl: w.queues[1].url, MessageBody: '{}', MessageGroupId: '1', MessageDeduplicationId: 'm2' }));
    await receive(clients.sqs, w.queues[1].url);
    const e = await w.control.stop().catch((x: unknown) => x);
    expect(e).toBeInstanceOf(JobControlTimeoutError);
    expect((e as JobControlTimeoutError).retryable).toBe(true);
    expect((e as Error).message).toMatch(/no message in flight on stage 1's queue/);

    const w2 = await world();
    await expect(whileStopped(w2.control, async () => Promise.reject(new Error('install failed')))).rejects.toThrow('install failed');
    expect(w2.mappings.get('uuid-0')!.state).toBe('Disabled');
    expect((await w2.pointers.read<Lease>(LEASE_NAME))?.value.owner).toBe(w2.owner);
  });
});

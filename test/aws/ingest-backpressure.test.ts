/**
 * The ingest function's back-pressure (lib/aws/ingest/ingest-backpressure.ts) with its age
 * bound, against fauxqs for the queue depths: a stage the stream feeds whose oldest
 * message is older than the bound holds the stream back (429, naming the stage and the
 * age) while something waits there; an emptied queue whose age CloudWatch still reports
 * holds nothing back; ages are read once per cache period for all queues together, and an
 * unreadable age holds nothing back. No local server implements CloudWatch, so the ages
 * come from a port the test sets (CloudWatchQueueAge is tested in queue-age.test.ts).
 */
import { SendMessageCommand } from '@aws-sdk/client-sqs';
import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { ManualClock } from '../../lib/api/types.ts';
import { createIngestHandler, type IngestHandlerConfig } from '../../lib/aws/ingest/ingest-handler.ts';
import type { QueueAgeSource } from '../../lib/aws/ingest/queue-age.ts';
import { queueNameOf } from '../../lib/aws/naming.ts';
import { createStageQueues, StaticQueues, type StageQueues } from '../../lib/aws/sqs/sqs-queues.ts';
import { compile } from '../../lib/graph/compile.ts';
import { drainQueue, localClients, unique } from './helpers.ts';

const clients = localClients();
const clock = new ManualClock(1_000_000);
const job = new Job(unique('bp'), { parallelism: 1, maxParallelism: 8 });
job
  .ingest<{ user: string }>('clicks')
  .keyBy((c) => c.user)
  .process({ processElement: (c, ctx) => ctx.emit(c) })
  .sinkTo(Sinks.collect(), 'out');
const plan = compile(job.graph);
const source = plan.stages.find((s) => s.inputs.some((e) => plan.edges[e].from.kind === 'source'))!;
const downstream = plan.stages.find((s) => s.id !== source.id)!;
let queues: StageQueues[];

beforeAll(async () => {
  queues = await createStageQueues(clients.sqs, plan);
});
afterAll(() => Object.values(clients).forEach((c) => c.destroy()));

/** Ages by queue name as set, counting the calls and the names asked. */
class SetAges implements QueueAgeSource {
  calls: string[][] = [];
  failing = false;
  constructor(public ages: Record<string, number> = {}) {}
  async oldestAgeSeconds(names: readonly string[]): Promise<ReadonlyMap<string, number>> {
    this.calls.push([...names]);
    if (this.failing) throw new Error('GetMetricData: throttled');
    return new Map(Object.entries(this.ages).filter(([n]) => names.includes(n)));
  }
}

function handler(extra: Partial<IngestHandlerConfig>) {
  return createIngestHandler({ job, sqs: clients.sqs, queues: new StaticQueues(queues), clock, backlogCacheMs: 0, ...extra });
}

async function post(h: ReturnType<typeof handler>) {
  const event = {
    version: '2.0',
    routeKey: '$default',
    rawPath: '/streams/clicks/events',
    rawQueryString: '',
    headers: { 'content-type': 'application/json' },
    requestContext: { http: { method: 'POST', path: '/streams/clicks/events', protocol: 'HTTP/1.1', sourceIp: '127.0.0.1', userAgent: 'test' }, requestId: unique('req'), stage: '$default' },
    body: JSON.stringify([{ user: 'ann' }]),
    isBase64Encoded: false,
  } as unknown as APIGatewayProxyEventV2;
  const res = await h(event);
  return { status: res.statusCode!, body: JSON.parse(res.body!) as { message?: string } };
}

const name = (stage: number) => queueNameOf(queues[stage].url);

describe('ingestion back-pressure by queue age', () => {
  it('429 while a stage the stream feeds holds a message older than the bound; not once the queue is empty though CloudWatch still reports the age', async () => {
    await clients.sqs.send(new SendMessageCommand({ QueueUrl: queues[downstream.id].url, MessageBody: 'waiting', MessageGroupId: '0', MessageDeduplicationId: unique('d') }));
    const ages = new SetAges({ [name(downstream.id)]: 400, [name(source.id)]: 5 });
    const h = handler({ maxQueueAgeMs: 300_000, queueAge: ages, queueAgeCacheMs: 0 });
    const held = await post(h);
    expect(held.status).toBe(429);
    expect(held.body.message).toContain(`is held back: stage ${downstream.id} "${downstream.name}" has had a message waiting 400 s (bound 300 s)`);
    expect(await drainQueue(clients.sqs, queues[source.id].url)).toEqual([]);
    // All the job's queues in one call.
    expect(ages.calls[0].sort()).toEqual(plan.stages.map((s) => name(s.id)).sort());

    await drainQueue(clients.sqs, queues[downstream.id].url);
    expect((await post(h)).status).toBe(202);
    await drainQueue(clients.sqs, queues[source.id].url);
  });

  it('an age within the bound, no age bound, or no age source: accepted', async () => {
    await clients.sqs.send(new SendMessageCommand({ QueueUrl: queues[downstream.id].url, MessageBody: 'waiting', MessageGroupId: '0', MessageDeduplicationId: unique('d') }));
    expect((await post(handler({ maxQueueAgeMs: 300_000, queueAge: new SetAges({ [name(downstream.id)]: 200 }) }))).status).toBe(202);
    const unbounded = new SetAges({ [name(downstream.id)]: 4000 });
    expect((await post(handler({ queueAge: unbounded }))).status).toBe(202);
    expect(unbounded.calls).toEqual([]);
    expect((await post(handler({ maxQueueAgeMs: 300_000 }))).status).toBe(202);
    await drainQueue(clients.sqs, queues[downstream.id].url);
    await drainQueue(clients.sqs, queues[source.id].url);
  });

  it('reads ages once per cache period; a failed read holds nothing back until the next', async () => {
    await clients.sqs.send(new SendMessageCommand({ QueueUrl: queues[downstream.id].url, MessageBody: 'waiting', MessageGroupId: '0', MessageDeduplicationId: unique('d') }));
    const ages = new SetAges({ [name(downstream.id)]: 900 });
    ages.failing = true;
    const h = handler({ maxQueueAgeMs: 300_000, queueAge: ages, queueAgeCacheMs: 60_000 });
    expect((await post(h)).status).toBe(202);
    ages.failing = false;
    expect((await post(h)).status).toBe(202);
    expect(ages.calls).toHaveLength(1);
    clock.advance(60_000);
    expect((await post(h)).status).toBe(429);
    expect((await post(h)).status).toBe(429);
    expect(ages.calls).toHaveLength(2);
    await drainQueue(clients.sqs, queues[downstream.id].url);
    await drainQueue(clients.sqs, queues[source.id].url);
  });

  it('refuses an age bound that is not a positive number of milliseconds', () => {
    expect(() => handler({ maxQueueAgeMs: 0, queueAge: new SetAges() })).toThrow('maxQueueAgeMs: expected a positive number of milliseconds, received 0');
  });
});

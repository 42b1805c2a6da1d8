/**
 * The checkpoint state machine in process (lib/testing/local-aws/checkpoint-state-machine.ts)
 * against a scripted task function that answers as the coordinator's steps would: which
 * executions run (ContinueAsNew as a new local execution that takes the lease over from
 * its parent, a new execution when input wakes an ended one, or a nudge cuts a wait
 * short), what each task is sent, and the transitions accounted, one per state entered.
 * The real steps on the local servers are in local-checkpoints*.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { AwsAccounting } from '../../../lib/aws/cost/accounting.ts';
import type { CheckpointHandler } from '../../../lib/aws/checkpoint/checkpoint-handler.ts';
import { type Carry, childName, INITIAL_CARRY, type TaskInput } from '../../../lib/aws/checkpoint/checkpoint-task.ts';
import { POINTER_NAME } from '../../../lib/checkpoint/driver.ts';
import { LocalCheckpointStateMachine } from '../../../lib/testing/local-aws/checkpoint-state-machine.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A coordinator that opens an epoch per unit of `traffic`, acks at once, and continues as new after limits.maxEpochs, as checkpoint-steps.ts orders it. */
function scripted() {
  const calls: TaskInput[] = [];
  const world = { traffic: 0, epoch: 0 };
  const handler = (async (event: TaskInput) => {
    calls.push(event);
    const c: Carry = { ...INITIAL_CARRY, ...event.carry };
    switch (event.action) {
      case 'resume':
        return { ...c, next: 'wait' };
      case 'open':
        if (c.n >= event.limits.maxEpochs) return { ...c, next: 'continue', child: { name: childName(event.execution, c.g), input: { g: c.g + 1, n: 0, failures: 0, parent: event.execution, next: 'wait', epoch: c.epoch } } };
        if (world.traffic === 0) return { ...c, next: 'end' };
        world.traffic--;
        return { ...c, next: 'inject', epoch: ++world.epoch, n: c.n + 1 };
      case 'inject':
        return { ...c, next: 'decide' };
      case 'decide':
        return { ...c, next: 'commit' };
      case 'commit':
        return { ...c, next: 'wait' };
      default:
        throw new Error(`unexpected ${event.action}`);
    }
  }) as unknown as CheckpointHandler;
  const pointers = { read: async <T,>(name: string) => (name === POINTER_NAME && world.epoch ? { value: { epoch: world.epoch } as T, version: world.epoch } : undefined) };
  return { calls, world, handler, pointers };
}

async function until(what: string, ok: () => boolean): Promise<void> {
  for (let i = 0; !ok(); i++) {
    if (i > 400) throw new Error(`${what}: not within 20 s`);
    await sleep(50);
  }
  await sleep(20); // the event logs are read asynchronously
}

const EPOCH = ['Inject', 'WaitForAcks', 'Decide', 'AfterDecide', 'Commit', 'WaitInterval', 'Open', 'AfterOpen'];
const START = ['Resume', 'AfterResume', 'WaitInterval', 'Open', 'AfterOpen'];

describe('the checkpoint state machine in process', () => {
  it('continues as a new execution after maxEpochs, the child taking the lease over; ended, input starts another; a transition per state entered', async () => {
    const s = scripted();
    s.world.traffic = 2;
    const accounting = new AwsAccounting();
    const sm = new LocalCheckpointStateMachine({ handler: s.handler, pointers: s.pointers, intervalMs: 1, pollMs: 1, epochTimeoutMs: 1000, execution: 'counts', maxEpochs: 1, accounting });
    try {
      await sm.start();
      await until('the end at zero traffic', () => sm.describe().includes('ended at zero traffic'));
      const resumes = s.calls.filter((c) => c.action === 'resume').map((c) => ({ execution: c.execution, carry: c.carry }));
      expect(resumes).toEqual([
        { execution: 'counts', carry: {} },
        { execution: 'counts-g1', carry: { g: 1, n: 0, failures: 0, parent: 'counts', next: 'wait', epoch: 1 } },
        { execution: 'counts-g2', carry: { g: 2, n: 0, failures: 0, parent: 'counts-g1', next: 'wait', epoch: 2 } },
      ]);
      expect(sm.committed).toEqual([1, 2]);
      // counts: an epoch, then ContinueAsNew and Done; counts-g1 the same; counts-g2 ends at its idle open.
      const continued = [...START, ...EPOCH, 'ContinueAsNew', 'Done'];
      const transitions = 2 * continued.length + [...START, 'Done'].length;
      expect(accounting.get('stepfunctions', 'StateTransition')).toMatchObject({ requests: transitions, items: transitions });

      // Input wakes it: a new execution under the last one's name (the lease owner), from the initial carry.
      s.world.traffic = 1;
      sm.onInput();
      await until('the epoch after the wake-up', () => sm.committed.length === 3);
      await until('the end at zero traffic', () => sm.describe().includes('ended at zero traffic'));
      // The woken execution starts at generation 0: after its epoch it continues as `counts-g1` again.
      const resumed = s.calls.filter((c) => c.action === 'resume').slice(3);
      expect(resumed.map((c) => [c.execution, c.carry])).toEqual([
        ['counts-g2', {}],
        ['counts-g1', { g: 1, n: 0, failures: 0, parent: 'counts-g2', next: 'wait', epoch: 3 }],
      ]);
      expect(sm.describe()).toBe('checkpoint loop ended at zero traffic: waiting for input; committed 3 (last 3), aborted 0');
    } finally {
      await sm.stop();
    }
    expect(sm.describe()).toMatch(/^checkpoint loop ended;/);
  }, 60_000);

  it('interval 0 waits until a nudge: the waiting execution is stopped and a new one opens the epoch; finish() ends after the final epoch', async () => {
    const s = scripted();
    const accounting = new AwsAccounting();
    const sm = new LocalCheckpointStateMachine({ handler: s.handler, pointers: s.pointers, intervalMs: 0, pollMs: 1, epochTimeoutMs: 1000, execution: 'quiet', accounting });
    try {
      await sm.start();
      await sleep(200);
      expect(sm.describe()).toBe('checkpoint loop waiting after wait (epoch 0); committed 0 (last -), aborted 0');
      expect(s.calls.map((c) => c.action)).toEqual(['resume']);
      s.world.traffic = 1;
      sm.nudge();
      await until('the nudged epoch', () => sm.committed.length === 1);
      expect(s.calls.map((c) => c.action)).toEqual(['resume', 'resume', 'open', 'inject', 'decide', 'commit']);
      // The stopped execution's Resume, AfterResume, WaitInterval, then the new one's.
      await until('the next wait', () => sm.describe().startsWith('checkpoint loop waiting after wait (epoch 1)'));
      expect(accounting.get('stepfunctions', 'StateTransition').items).toBe(3 + START.length + EPOCH.length - 2);
      s.world.traffic = 1;
      await sm.finish();
      expect(sm.committed).toEqual([1, 2]);
      expect(sm.describe()).toMatch(/^checkpoint loop ended; committed 2 \(last 2\), aborted 0; final: covering activity at \d+, epoch 2$/);
    } finally {
      await sm.stop();
    }
  }, 60_000);
});

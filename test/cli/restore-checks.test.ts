/** What a refused --resume says changed in the plan, and what a refused --from lists (restore-checks.ts). */
import { describe, expect, it } from 'vitest';
import { Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { restoreHint } from '../../lib/cli/checkpoints.ts';
import { ConfigError } from '../../lib/errors.ts';
import { compile } from '../../lib/graph/compile.ts';
import { checkRestoreSource, planChanges, planRecord, type PlanRecord } from '../../lib/cli/restore-checks.ts';

const base: PlanRecord = {
  fingerprint: 'a',
  maxParallelism: 128,
  operators: [
    ['events', 'source'],
    ['parse', 'map'],
    ['count', 'process'],
    ['out', 'sink'],
  ],
  stages: [
    { name: 'events', parallelism: 2, operators: ['events', 'parse'] },
    { name: 'count', parallelism: 2, operators: ['count', 'out'] },
  ],
};

describe('planChanges', () => {
  it('names operators added, removed, of another kind or moved, stages and parallelism', () => {
    const now: PlanRecord = {
      fingerprint: 'b',
      maxParallelism: 256,
      operators: [
        ['events', 'source'],
        ['parse', 'filter'],
        ['count', 'process'],
        ['enrich', 'map'],
        ['out', 'sink'],
      ],
      stages: [
        { name: 'events', parallelism: 4, operators: ['events', 'parse'] },
        { name: 'count', parallelism: 2, operators: ['count', 'enrich'] },
        { name: 'out', parallelism: 1, operators: ['out'] },
      ],
    };
    expect(planChanges(base, now)).toEqual([
      'maxParallelism 128 -> 256',
      'operator "enrich" (map) added',
      'operator "parse" was map, is now filter',
      'operator "out" moved from stage "count" to "out"',
      '2 stages -> 3',
      'stage "events" parallelism 2 -> 4',
    ]);
    expect(planChanges(base, { ...base, operators: base.operators.filter(([n]) => n !== 'parse') })).toEqual(['operator "parse" (map) removed']);
    expect(planChanges(base, { ...base, fingerprint: 'c' })).toEqual([]);
  });

  it('records a compiled plan: operators with their kinds, stages with parallelism', () => {
    const job = new Job('rec', { parallelism: 3 });
    job.ingest<{ k: string; t: number }>('in', { timestamp: (e) => e.t }).map((e) => e).name('m').sinkTo(Sinks.collect(), 'out');
    const r = planRecord(compile(job.graph));
    expect(r.operators.map(([n]) => n)).toEqual(['in', 'm', 'out']);
    expect(r.stages.every((s) => s.parallelism === 3)).toBe(true);
    expect(r.stages.flatMap((s) => s.operators)).toEqual(['in', 'm', 'out']);
    expect(r.fingerprint).toMatch(/^\w+$/);
  });
});

describe('checkRestoreSource', () => {
  const listing = { checkpoints: [{ epoch: 4 }, { epoch: 5 }], savepoints: [{ label: 'v1' }] };
  it('accepts a retained epoch and a savepoint label', () => {
    expect(() => checkRestoreSource('/ck', '5', listing)).not.toThrow();
    expect(() => checkRestoreSource('/ck', 'v1', listing)).not.toThrow();
  });
  it('refuses anything else, listing where it looked and what is there', () => {
    expect(() => checkRestoreSource('/ck', '3', listing)).toThrow(ConfigError);
    expect(() => checkRestoreSource('/ck', '3', listing)).toThrow('(in /ck: retained checkpoints 4, 5; savepoints "v1"; another directory: --checkpoint-dir), received epoch 3: no such retained checkpoint in /ck');
    expect(() => checkRestoreSource('/ck', 'v2', { checkpoints: [], savepoints: [] })).toThrow(/retained checkpoints \(none\); savepoints \(none\).*received "v2": no savepoint of that label in \/ck\/savepoints/);
  });
});

describe('restoreHint (the command `sluice savepoint` prints)', () => {
  it('carries the flags that found the savepoint, so the restore looks in the same place', () => {
    expect(restoreHint('jobs/orders.ts', 'v2', { target: 'embedded', checkpointDir: '/var/lib/orders' })).toBe('sluice restore jobs/orders.ts --checkpoint-dir /var/lib/orders --from v2');
    expect(restoreHint('jobs/orders.ts', 'v2', { target: 'aws', table: 't', bucket: 'b', stateMachine: 'arn:aws:states:eu-west-1:1:stateMachine:s', queuePrefix: 'Orders-', param: ['parallelism=3'] })).toBe(
      'sluice restore jobs/orders.ts --target aws --table t --bucket b --state-machine arn:aws:states:eu-west-1:1:stateMachine:s --queue-prefix Orders- --param parallelism=3 --from v2',
    );
  });

  it('quotes what a shell would split or expand', () => {
    expect(restoreHint('my jobs/o.ts', "it's", { checkpointDir: '/tmp/a b' })).toBe(`sluice restore 'my jobs/o.ts' --checkpoint-dir '/tmp/a b' --from 'it'\\''s'`);
  });
});

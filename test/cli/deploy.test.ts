/** `sluice deploy|destroy`'s pieces that need no AWS: what they print (and their --json shapes) after the CDK CLI ran, and the missing CDK CLI. */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { cdkCliPath, deployResult, describeOutputs, destroyResult } from '../../lib/cli/deploy.ts';

describe('sluice deploy', () => {
  it('prints the outputs a user needs next, with the publish command for each stream', () => {
    const lines = describeOutputs(
      { stackName: 'Sluice-orders', streams: ['orders'] },
      { EndpointUrl: 'https://abc.execute-api.eu-west-1.amazonaws.com/', StateTableName: 'sluice-orders', DeadLetterQueueUrls: 'https://sqs/q1', DashboardName: 'd' },
      'jobs/orders.ts',
    );
    expect(lines[0]).toBe('deployed Sluice-orders:');
    expect(lines).toContain('  endpoint           https://abc.execute-api.eu-west-1.amazonaws.com/');
    expect(lines).toContain('next: sluice publish orders events.jsonl --url https://abc.execute-api.eu-west-1.amazonaws.com/');
    expect(lines.at(-1)).toBe('remove it: sluice destroy jobs/orders.ts');
  });

  it('finds the CDK CLI of the project, or of Sluice itself', () => {
    expect(cdkCliPath(mkdtempSync(join(tmpdir(), 'sluice-no-cdk-')))).toMatch(/aws-cdk\/bin\/cdk$/);
  });

  it('--json: the stack, its outputs by name, and the publish and destroy commands the report prints', () => {
    const s = { job: { name: 'orders' }, stackName: 'Orders-Staging', outdir: '/p/cdk.out', streams: ['orders', 'refunds'] };
    const outputs = { EndpointUrl: 'https://abc.execute-api.eu-west-1.amazonaws.com/', StateTableName: 'sluice-orders' };
    const r = deployResult(s, outputs, 'jobs/orders.ts');
    expect(Object.keys(r)).toEqual(['job', 'stackName', 'outdir', 'outputs', 'streams', 'publish', 'destroy']);
    expect(r).toEqual({
      job: 'orders',
      stackName: 'Orders-Staging',
      outdir: '/p/cdk.out',
      outputs,
      streams: ['orders', 'refunds'],
      publish: ['sluice publish orders events.jsonl --url https://abc.execute-api.eu-west-1.amazonaws.com/', 'sluice publish refunds events.jsonl --url https://abc.execute-api.eu-west-1.amazonaws.com/'],
      destroy: 'sluice destroy jobs/orders.ts --stack-name Orders-Staging',
    });
    // Without an endpoint output there is nothing to publish to.
    expect(deployResult({ ...s, stackName: 'Sluice-orders' }, {}, 'jobs/orders.ts')).toMatchObject({ publish: [], destroy: 'sluice destroy jobs/orders.ts' });
    // The destroy command repeats what names the stack and what the report says is retained.
    const flags = { removalPolicy: 'destroy', param: ['region=eu'], queuePrefix: 'stg-' } as const;
    expect(deployResult(s, {}, 'jobs/orders.ts', flags).destroy).toBe('sluice destroy jobs/orders.ts --stack-name Orders-Staging --queue-prefix stg- --param region=eu --removal-policy destroy');
  });

  it('destroy --json: the stack and whether its table, buckets and log groups are retained', () => {
    const s = { job: { name: 'orders' }, stackName: 'Sluice-orders' };
    expect(destroyResult(s, undefined)).toEqual({ job: 'orders', stackName: 'Sluice-orders', destroyed: true, retained: true });
    expect(destroyResult(s, 'retain').retained).toBe(true);
    expect(destroyResult(s, 'destroy').retained).toBe(false);
  });
});

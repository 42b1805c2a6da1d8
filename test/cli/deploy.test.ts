/** `sluice deploy`'s pieces that need no AWS: what it prints after a deploy, and the missing CDK CLI. */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { cdkCliPath, describeOutputs } from '../../lib/cli/deploy.ts';

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
});

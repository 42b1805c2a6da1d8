/**
 * Queue ages from CloudWatch (lib/aws/ingest/queue-age.ts): one GetMetricData call asks
 * SQS's ApproximateAgeOfOldestMessage (Maximum per minute) of each queue over the last
 * five minutes, newest first, and answers each queue's newest point; a queue with no
 * point is absent. No local server implements CloudWatch, so the client is a mock.
 */
import { CloudWatchClient, GetMetricDataCommand, type GetMetricDataCommandInput } from '@aws-sdk/client-cloudwatch';
import { mockClient } from 'aws-sdk-client-mock';
import { describe, expect, it } from 'vitest';
import { AwsAccounting } from '../../lib/aws/cost/accounting.ts';
import { CloudWatchQueueAge } from '../../lib/aws/ingest/queue-age.ts';
import { queueNameOf } from '../../lib/aws/naming.ts';

describe('CloudWatchQueueAge', () => {
  it('asks every queue in one call and answers the newest point of each', async () => {
    const cw = new CloudWatchClient({ region: 'us-east-1', credentials: { accessKeyId: 'x', secretAccessKey: 'x' } });
    const mock = mockClient(cw);
    const inputs: GetMetricDataCommandInput[] = [];
    mock.on(GetMetricDataCommand).callsFake((input: GetMetricDataCommandInput) => {
      inputs.push(input);
      return { MetricDataResults: [{ Id: 'age0', Values: [42, 10, 3] }, { Id: 'age1', Values: [] }] };
    });
    const accounting = new AwsAccounting();
    const ages = await new CloudWatchQueueAge(cw, { now: () => 1_000_000_000, accounting }).oldestAgeSeconds(['orders-s0.fifo', 'orders-s1.fifo']);
    expect([...ages]).toEqual([['orders-s0.fifo', 42]]);
    expect(inputs).toHaveLength(1);
    expect(inputs[0]).toMatchObject({ StartTime: new Date(1_000_000_000 - 300_000), EndTime: new Date(1_000_000_000), ScanBy: 'TimestampDescending' });
    expect(inputs[0].MetricDataQueries![1]).toEqual({
      Id: 'age1',
      MetricStat: { Metric: { Namespace: 'AWS/SQS', MetricName: 'ApproximateAgeOfOldestMessage', Dimensions: [{ Name: 'QueueName', Value: 'orders-s1.fifo' }] }, Period: 60, Stat: 'Maximum' },
    });
    expect(accounting.get('cloudwatch', 'GetMetricData')).toMatchObject({ requests: 1, items: 2 });
  });

  it('names a queue by the last segment of its URL', () => {
    expect(queueNameOf('https://sqs.eu-west-1.amazonaws.com/123456789012/blue-orders-s2.fifo')).toBe('blue-orders-s2.fifo');
  });
});

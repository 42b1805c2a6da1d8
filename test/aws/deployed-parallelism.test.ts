/**
 * The Lambda side of `sluice rescale --target aws` (lib/aws/restore/deployed-parallelism.ts):
 * every function that builds the plan (each stage queue's consumers and the ones their
 * SLUICE_JOB_FUNCTIONS names) gets the new SLUICE_PARALLELISM and plan fingerprint with its
 * other variables kept, and waits until Lambda finished the update; the rescaled stage's
 * mapping gets its maximum concurrency; a second run changes nothing. No local server
 * implements the Lambda API, so it is a client mock (aws-sdk-client-mock).
 */
import {
  GetFunctionConfigurationCommand,
  LambdaClient,
  ListEventSourceMappingsCommand,
  UpdateEventSourceMappingCommand,
  UpdateFunctionConfigurationCommand,
} from '@aws-sdk/client-lambda';
import { mockClient } from 'aws-sdk-client-mock';
import { describe, expect, it } from 'vitest';
import { AwsFunctionConfigPort, environmentFor, setDeployedParallelism } from '../../lib/aws/restore/deployed-parallelism.ts';
import { decodeParallelism, encodeParallelism } from '../../lib/aws/parallelism-env.ts';

const queue = (s: number) => `arn:aws:sqs:us-east-1:123456789012:orders-s${s}.fifo`;
const fn = (name: string) => `arn:aws:lambda:us-east-1:123456789012:function:${name}`;

function deployment() {
  const env: Record<string, Record<string, string>> = {
    [fn('stage0')]: { SLUICE_TABLE: 'sluice-orders', SLUICE_PLAN_FINGERPRINT: 'old', SLUICE_JOB_FUNCTIONS: 'ingest,checkpoint-open' },
    [fn('stage1')]: { SLUICE_TABLE: 'sluice-orders', SLUICE_PLAN_FINGERPRINT: 'old', SLUICE_BUCKET: 'b' },
    ingest: { SLUICE_TABLE: 'sluice-orders', SLUICE_PLAN_FINGERPRINT: 'old' },
    'checkpoint-open': { SLUICE_TABLE: 'sluice-orders', SLUICE_PLAN_FINGERPRINT: 'old', SLUICE_PARALLELISM: '{"default":3}' },
  };
  const lambda = new LambdaClient({ region: 'us-east-1', credentials: { accessKeyId: 'x', secretAccessKey: 'x' } });
  const mock = mockClient(lambda);
  const concurrency: Record<string, number> = {};
  mock.on(ListEventSourceMappingsCommand).callsFake((i: { EventSourceArn: string }) => ({ EventSourceMappings: [{ UUID: `uuid-${i.EventSourceArn.slice(-6, -5)}`, FunctionArn: fn(`stage${i.EventSourceArn.slice(-6, -5)}`) }] }));
  mock.on(GetFunctionConfigurationCommand).callsFake((i: { FunctionName: string }) => ({ Environment: { Variables: env[i.FunctionName] }, LastUpdateStatus: 'Successful', State: 'Active' }));
  mock.on(UpdateFunctionConfigurationCommand).callsFake((i: { FunctionName: string; Environment: { Variables: Record<string, string> } }) => {
    env[i.FunctionName] = i.Environment.Variables;
    return {};
  });
  mock.on(UpdateEventSourceMappingCommand).callsFake((i: { UUID: string; ScalingConfig: { MaximumConcurrency: number } }) => {
    concurrency[i.UUID] = i.ScalingConfig.MaximumConcurrency;
    return {};
  });
  return { env, mock, concurrency, port: new AwsFunctionConfigPort(lambda) };
}

describe('setDeployedParallelism', () => {
  it("gives every function of the plan the new parallelism and fingerprint, keeps their other variables, sets the stage's concurrency", async () => {
    const d = deployment();
    const parallelism = { operators: { 'per-customer': 8 } };
    const log: string[] = [];
    const changed = await setDeployedParallelism(d.port, { stageQueues: [queue(0), queue(1)], parallelism, fingerprint: 'new', stage: { queueArn: queue(1), maxConcurrency: 8 } }, (l) => log.push(l));
    expect(changed.sort()).toEqual([fn('stage0'), fn('stage1'), 'checkpoint-open', 'ingest'].sort());
    for (const e of Object.values(d.env)) {
      expect(e.SLUICE_PLAN_FINGERPRINT).toBe('new');
      expect(decodeParallelism(e.SLUICE_PARALLELISM)).toEqual(parallelism);
      expect(e.SLUICE_TABLE).toBe('sluice-orders');
    }
    expect(d.env[fn('stage1')].SLUICE_BUCKET).toBe('b');
    expect(d.env[fn('stage0')].SLUICE_JOB_FUNCTIONS).toBe('ingest,checkpoint-open');
    expect(d.concurrency).toEqual({ 'uuid-1': 8 });
    expect(log.some((l) => l.includes('maximum concurrency 8'))).toBe(true);
    // Each update was waited for (the waiter reads the configuration after the update).
    const calls = d.mock.calls().map((c) => c.args[0].constructor.name);
    const firstUpdate = calls.indexOf('UpdateFunctionConfigurationCommand');
    expect(calls[firstUpdate + 1]).toBe('GetFunctionConfigurationCommand');
    // Run again (a rescale that died after this step): nothing to change.
    expect(await setDeployedParallelism(d.port, { stageQueues: [queue(0), queue(1)], parallelism, fingerprint: 'new' }, () => {})).toEqual([]);
  });

  it('back to the job\'s own parallelism removes the variable', () => {
    expect(environmentFor({ SLUICE_PARALLELISM: '{"default":3}', A: '1' }, { parallelism: undefined, fingerprint: 'f' })).toEqual({ A: '1', SLUICE_PLAN_FINGERPRINT: 'f' });
    expect(encodeParallelism({ operators: {} })).toBeUndefined();
    expect(encodeParallelism({ operators: { b: 2, a: 1 }, default: 4 })).toBe('{"default":4,"operators":{"a":1,"b":2}}');
  });

  it('names a variable that is not a parallelism', () => {
    expect(() => decodeParallelism('{"default":0}')).toThrow(/SLUICE_PARALLELISM\.default: expected JSON \{"default"\?: P, "operators"\?: \{"<operator>": P\}\}, P a positive integer, received/);
    expect(() => decodeParallelism('nope')).toThrow(/SLUICE_PARALLELISM: expected JSON/);
  });
});

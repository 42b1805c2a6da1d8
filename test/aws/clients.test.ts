/**
 * The handlers' client factory (lib/aws/clients.ts): a server that accepts the connection
 * and never answers makes the call fail with a TimeoutError, not hang until the function
 * times out; the timeouts come from the environment, malformed ones are refused by name.
 */
import { createServer, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { DynamoDBClient, ListTablesCommand } from '@aws-sdk/client-dynamodb';
import { S3Client, GetObjectCommand } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_SDK_TIMEOUTS, handlerClientConfig, SDK_TIMEOUT_ENV, sdkTimeoutsFromEnv } from '../../lib/aws/clients.ts';
import { mapS3Error } from '../../lib/aws/transport-errors.ts';
import { ConfigError } from '../../lib/errors.ts';

const credentials = { accessKeyId: 'AKIDTEST', secretAccessKey: 'x' };

describe('handlerClientConfig', () => {
  let server: Server;
  const sockets: Socket[] = [];
  let endpoint: string;
  let accepted = 0;
  beforeAll(async () => {
    // Reads the request, never writes a byte back.
    server = createServer((s) => {
      accepted++;
      sockets.push(s);
      s.on('data', () => undefined);
      s.on('error', () => undefined);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((r) => server.close(r));
  });

  it('fails a call the server never answers with a TimeoutError the adapters treat as transient', async () => {
    const env = { [SDK_TIMEOUT_ENV.connectionTimeoutMs]: '1000', [SDK_TIMEOUT_ENV.requestTimeoutMs]: '150' };
    const config = handlerClientConfig(sdkTimeoutsFromEnv(env));
    const db = new DynamoDBClient({ ...config, region: 'us-east-1', endpoint, credentials, maxAttempts: 1 });
    const before = accepted;
    const err = await db.send(new ListTablesCommand({})).then(
      () => undefined,
      (e: unknown) => e as Error,
    );
    expect(err?.name).toBe('TimeoutError');
    expect(accepted).toBe(before + 1);
    const s3 = new S3Client({ ...handlerClientConfig(sdkTimeoutsFromEnv(env)), region: 'us-east-1', endpoint, credentials, forcePathStyle: true, maxAttempts: 1 });
    const e3 = await s3.send(new GetObjectCommand({ Bucket: 'b', Key: 'k' })).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect((e3 as Error).name).toBe('TimeoutError');
    expect(mapS3Error(e3, 'GetObject', 'b', 'k').retryable).toBe(true);
    db.destroy();
    s3.destroy();
  });

  it('retries a timed-out attempt (the SDK counts a TimeoutError as transient)', async () => {
    const config = handlerClientConfig({ connectionTimeoutMs: 1000, requestTimeoutMs: 100 });
    const db = new DynamoDBClient({ ...config, region: 'us-east-1', endpoint, credentials, maxAttempts: 2 });
    const before = accepted;
    await expect(db.send(new ListTablesCommand({}))).rejects.toMatchObject({ name: 'TimeoutError' });
    // Keep-alive sockets are not reused after a timeout: each attempt opened its own connection.
    expect(accepted - before).toBe(2);
    db.destroy();
  });

  it('reads the timeouts from the environment, with defaults, and refuses malformed ones by name', () => {
    expect(sdkTimeoutsFromEnv({})).toEqual(DEFAULT_SDK_TIMEOUTS);
    expect(sdkTimeoutsFromEnv({ [SDK_TIMEOUT_ENV.connectionTimeoutMs]: '250', [SDK_TIMEOUT_ENV.requestTimeoutMs]: '900' })).toEqual({ connectionTimeoutMs: 250, requestTimeoutMs: 900 });
    expect(() => sdkTimeoutsFromEnv({ [SDK_TIMEOUT_ENV.requestTimeoutMs]: '2s' })).toThrow(ConfigError);
    expect(() => sdkTimeoutsFromEnv({ [SDK_TIMEOUT_ENV.requestTimeoutMs]: '2s' })).toThrow(/SLUICE_SDK_REQUEST_TIMEOUT_MS.*whole number of milliseconds.*"2s"/);
    expect(() => sdkTimeoutsFromEnv({ [SDK_TIMEOUT_ENV.connectionTimeoutMs]: '0' })).toThrow(/SLUICE_SDK_CONNECTION_TIMEOUT_MS/);
  });
});

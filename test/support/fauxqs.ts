/**
 * fauxqs (SQS, SNS and S3 emulator) in this process on a free loopback port.
 * startFauxqs() from the package listens on 0.0.0.0; building the app ourselves keeps
 * it on 127.0.0.1. Queue URLs then carry the request's host (127.0.0.1:port), so SDK
 * clients need only `endpoint` (and `forcePathStyle: true` for S3).
 */
import { buildApp } from 'fauxqs';
import type { LocalServer } from './dynamodb-local.ts';

export async function startFauxqs(): Promise<LocalServer> {
  const app = buildApp({ logger: false });
  const address = await app.listen({ port: 0, host: '127.0.0.1' });
  const endpoint = new URL(address).origin;
  return {
    endpoint,
    stop: async () => {
      await app.close();
    },
  };
}

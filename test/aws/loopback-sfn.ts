/**
 * A loopback Step Functions endpoint for tests (there is no local Step Functions server
 * that speaks the API): each request's operation and input go to `handle`, which answers
 * with a result or an AWS error type. Returns a client bound to it.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { SFNClient } from '@aws-sdk/client-sfn';
import { inject } from 'vitest';

export type SfnAnswer = { readonly result: unknown } | { readonly error: string; readonly message?: string };

export interface LoopbackStepFunctions {
  readonly sfn: SFNClient;
  close(): Promise<void>;
}

export async function loopbackStepFunctions(handle: (op: string, input: Record<string, string>) => SfnAnswer): Promise<LoopbackStepFunctions> {
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      const op = String(req.headers['x-amz-target']).replace('AWSStepFunctions.', '');
      const answer = handle(op, JSON.parse(body) as Record<string, string>);
      res.setHeader('content-type', 'application/x-amz-json-1.0');
      if ('error' in answer) {
        res.statusCode = 400;
        res.end(JSON.stringify({ __type: answer.error, message: answer.message ?? answer.error }));
      } else res.end(JSON.stringify(answer.result));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const sfn = new SFNClient({ endpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, region: inject('awsRegion'), credentials: inject('awsCredentials'), maxAttempts: 1 });
  return {
    sfn,
    async close() {
      sfn.destroy();
      await new Promise((r) => server.close(r));
    },
  };
}

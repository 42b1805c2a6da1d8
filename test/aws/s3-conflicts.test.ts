/**
 * S3 answers 409 ConditionalRequestConflict while another conditional write on the same
 * key is in flight, and 409 OperationAborted while a conflicting operation is: both go
 * away by themselves, so they are retryable, never permanent. Against fauxqs's S3, with
 * the 409s injected by middleware (no emulator produces them): the blob store's put
 * tries again and the object lands once.
 */
import { S3ServiceException } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createBucket, S3BlobStore } from '../../lib/aws/s3/s3-blob-store.ts';
import { mapS3Error, S3RequestError } from '../../lib/aws/transport-errors.ts';
import { localClients, unique } from './helpers.ts';

const clients = localClients();
const bucket = unique('conflicts');
beforeAll(() => createBucket(clients.s3, bucket));
afterAll(() => clients.s3.destroy());

const conflict = (name: 'ConditionalRequestConflict' | 'OperationAborted') =>
  new S3ServiceException({ name, $fault: 'client', $metadata: { httpStatusCode: 409 }, message: `${name}: a conflicting operation is in progress on this resource; try again` });

/** Fails the first `failures` PutObject calls with `name` before they are sent; counts the ones S3 received. */
function injectConflicts(name: 'ConditionalRequestConflict' | 'OperationAborted', failures: number) {
  const seen = { injected: 0, sent: 0 };
  const s3 = localClients().s3;
  s3.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName === 'PutObjectCommand') {
        if (seen.injected < failures) {
          seen.injected++;
          throw conflict(name);
        }
        seen.sent++;
      }
      return next(args);
    },
    { step: 'initialize', name: 'injectConflicts' },
  );
  return { s3, seen };
}

describe('S3 409 conflicts', () => {
  it('are classified retryable (ConditionalRequestConflict, OperationAborted); 412 and 403 stay permanent', () => {
    for (const name of ['ConditionalRequestConflict', 'OperationAborted'] as const) {
      const e = mapS3Error(conflict(name), 'PutObject', bucket, 'k');
      expect(e).toBeInstanceOf(S3RequestError);
      expect(e.retryable, name).toBe(true);
    }
    const failed = new S3ServiceException({ name: 'PreconditionFailed', $fault: 'client', $metadata: { httpStatusCode: 412 }, message: 'At least one of the pre-conditions you specified did not hold' });
    expect(mapS3Error(failed, 'PutObject', bucket, 'k').retryable).toBe(false);
    const denied = new S3ServiceException({ name: 'AccessDenied', $fault: 'client', $metadata: { httpStatusCode: 403 }, message: 'Access Denied' });
    expect(mapS3Error(denied, 'PutObject', bucket, 'k').retryable).toBe(false);
  });

  for (const name of ['ConditionalRequestConflict', 'OperationAborted'] as const) {
    it(`a put that meets ${name} tries again and writes the object once`, async () => {
      const { s3, seen } = injectConflicts(name, 1);
      const store = new S3BlobStore({ s3, bucket, conflictRetryDelayMs: 0 });
      const key = unique('obj');
      const body = new TextEncoder().encode(`snapshot ${name}`);
      await store.put(key, body);
      expect(seen).toEqual({ injected: 1, sent: 1 });
      expect(new TextDecoder().decode(await store.get(key))).toBe(`snapshot ${name}`);
      expect(await store.list(key)).toEqual([key]);
      s3.destroy();
    });
  }

  it('a conflict that does not clear fails retryable after the attempts, for the handler to back off', async () => {
    const { s3, seen } = injectConflicts('ConditionalRequestConflict', 100);
    const store = new S3BlobStore({ s3, bucket, conflictRetryDelayMs: 0 });
    const key = unique('stuck');
    const err = await store.put(key, new Uint8Array([1, 2, 3])).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(S3RequestError);
    expect((err as S3RequestError).retryable).toBe(true);
    expect(seen.sent).toBe(0);
    expect(seen.injected).toBe(S3BlobStore.CONFLICT_ATTEMPTS);
    expect(await store.get(key)).toBeUndefined();
    s3.destroy();
  });
});

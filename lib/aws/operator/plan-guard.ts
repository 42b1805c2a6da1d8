/**
 * A stage function processes nothing under another plan than the one the job's state is
 * at. After `sluice rescale` (or a restore of a changed job) the coordinator record names
 * the plan the partitions were installed for; a function still or again deployed with
 * another plan (a `cdk deploy` without the rescaled parallelism) would route records and
 * own key groups by the wrong partition counts, and its partitions would not see the state
 * logged by the others. So before a container opens its first partition it reads the
 * record once: a mismatch fails the group as an infrastructure error (it backs off and
 * stalls with the alarm, nothing is consumed) until a deployment of the right plan or a
 * restore makes them agree. Without checkpoints there is no record and nothing to check.
 */
import { RECORD_NAME } from '../../checkpoint/driver.ts';
import { PlanMismatchError } from '../../checkpoint/errors.ts';
import type { CoordinatorRecord } from '../../checkpoint/protocol.ts';
import type { PointerStore } from '../../checkpoint/storage.ts';

export class PlanGuard {
  private agreed = false;

  constructor(
    private readonly pointers: PointerStore,
    private readonly fingerprint: string,
  ) {}

  /** Resolves once the record agrees (or there is none); throws PlanMismatchError otherwise, and reads again next time. */
  async check(): Promise<void> {
    if (this.agreed) return;
    const rec = (await this.pointers.read<CoordinatorRecord>(RECORD_NAME))?.value;
    if (rec && rec.fingerprint !== this.fingerprint) {
      throw new PlanMismatchError('the plan the job\'s state is at (its coordinator record; deploy the job at the parallelism sluice rescale set, e.g. SluiceJob parallelism)', this.fingerprint, rec.fingerprint);
    }
    this.agreed = true;
  }
}

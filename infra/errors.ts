/**
 * Misconfiguration of the deployment fails at synth with what was received and what
 * was expected (contract point 6), as one typed error the tests and callers can match.
 */
import { FieldError } from '../lib/errors.ts';

/** A SluiceJob prop (or a combination of props) is invalid. */
export class SluiceJobPropsError extends FieldError {
  readonly code = 'SLUICE_JOB_PROPS';
}

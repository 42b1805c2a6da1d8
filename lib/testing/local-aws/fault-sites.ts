/**
 * The AWS fault sites on a local-AWS run's clients: every SDK command crosses its site
 * (lib/util/fault-sites.ts) before it is sent and after it is answered, so an armed kill
 * stops the process between any two AWS calls. A command no site covers crosses
 * `aws.uncovered`, which no kill names: the soak's completeness test fails on it.
 */
import type { SQSClient } from '@aws-sdk/client-sqs';
import { faultSite, siteOfCommand } from '../../util/fault-sites.ts';

// Any SDK client: the middleware reads only the command's name.
type AnyClient = { readonly middlewareStack: unknown };

const NAME = 'sluiceFaultSites';

export function crossFaultSites(clients: Readonly<Record<string, AnyClient>>): void {
  for (const client of Object.values(clients)) {
    const stack = client.middlewareStack as SQSClient['middlewareStack'];
    stack.remove(NAME);
    stack.add(
      (next, context) => async (args) => {
        const site = siteOfCommand(context.commandName ?? '')?.name ?? 'aws.uncovered';
        faultSite(`${site}:before`);
        const out = await next(args);
        faultSite(`${site}:after`);
        return out;
      },
      { step: 'initialize', name: NAME },
    );
  }
}

/**
 * A plan sent in parts (contracts/plan-parts.ts): the parts a run's request names by digest, as
 * they arrive in `planPart` signals (taken by the inbox) or, in a run that continues one that
 * rolled over, as they are read back from that one. The parse activity reads them through the
 * `planPart` query, so no event holds more than one part.
 */
import { ApplicationFailure, condition, setHandler } from '@temporalio/workflow';
import {
  PLAN_PARTS_WAIT,
  type PlanPartInput,
  PlanParts as PlanPartsSchema,
  digestOf,
} from '../../contracts/plan-parts';
import { planPartQuery } from '../../contracts/messages';

export class PlanParts {
  private readonly held: (string | undefined)[];

  private constructor(readonly digests: string[]) {
    this.held = digests.map(() => undefined);
    setHandler(planPartQuery, (part) => (typeof part === 'number' ? (this.held[part] ?? null) : null));
  }

  /** The parts of a request that names well-formed `planParts`; undefined for any other (splitInput refuses a bad one). */
  static of(input: unknown): PlanParts | undefined {
    const named =
      input !== null && typeof input === 'object' ? (input as { planParts?: unknown }).planParts : undefined;
    const parsed = PlanPartsSchema.safeParse(named);
    return parsed.success ? new PlanParts(parsed.data) : undefined;
  }

  /** Takes a part whose text is the one its digest names; otherwise says why not. A part sent again changes nothing. */
  take({ part, text }: PlanPartInput): string | undefined {
    if (part >= this.digests.length)
      return `part ${part} is not in the plan: the request names ${this.digests.length} part(s) (planParts)`;
    if (digestOf(text) !== this.digests[part])
      return `part ${part}'s text does not have the SHA-256 the request names for it (planParts[${part}])`;
    this.held[part] = text;
    return undefined;
  }

  /** Waits for every part; fails the run, naming the parts missing, if they do not all come in PLAN_PARTS_WAIT. */
  async gather(): Promise<void> {
    if (!this.missing().length) return;
    if (await condition(() => !this.missing().length, PLAN_PARTS_WAIT)) return;
    const missing = this.missing();
    throw ApplicationFailure.create({
      type: 'InvalidRequest',
      nonRetryable: true,
      message:
        `planParts: ${missing.length} of ${this.digests.length} part(s) did not arrive within ${PLAN_PARTS_WAIT} ` +
        `(parts ${missing.join(', ')}); each comes in a planPart signal, which \`flotilla start\` sends`,
    });
  }

  /** Takes each part as the run this one continues held it (`read`, a part's text by index). */
  async readBack(read: (part: number) => Promise<string | undefined>): Promise<void> {
    for (const part of this.missing()) {
      const why = this.take({ part, text: (await read(part)) ?? '' });
      if (why)
        throw ApplicationFailure.create({ type: 'RolloverLost', nonRetryable: true, message: `read back: ${why}` });
    }
  }

  /** Every part's text, in order, once all have arrived. */
  texts(): string[] {
    return this.held.map((text) => text ?? '');
  }

  private missing(): number[] {
    return this.held.flatMap((text, i) => (text === undefined ? [i] : []));
  }
}

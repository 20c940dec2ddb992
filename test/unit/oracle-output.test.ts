/** What is shown of a test run the hidden tests took part in: the counts its runner printed, nothing else. */
import { describe, expect, it } from 'vitest';
import { withheldOutput } from '../../src/git/oracle';

const WITHHELD =
  "[flotilla: hidden tests took part in this run, so its output is withheld; its full log stays on the worker's host]";

describe('withheldOutput', () => {
  it('shows the last count of each kind and none of the text around it', () => {
    const tail = 'IyEvYmluL2Jhc2gKIyBPUkFDTEU=\nTests: 2 failed, 10 passed, 12 total\n1 failed 11 passed\n';
    expect(withheldOutput(tail)).toBe(`${WITHHELD}\n[flotilla: the test runner reported 1 failed, 11 passed]`);
  });

  it('says only that the output is withheld when no counts are recognised, or a "count" is a long number', () => {
    expect(withheldOutput('SGlkZGVuIHRlc3Q=\n')).toBe(WITHHELD);
    expect(withheldOutput('4142434445464748 passed\n')).toBe(WITHHELD);
  });
});

/** The CLI's number options: plain decimals only, refused naming the option. */
import { describe, expect, it } from 'vitest';
import { positiveInteger, positiveNumber } from '../../src/cli/options';

describe('--add-budget and --limit', () => {
  it('take plain decimals', () => {
    expect(['2', '0.5', '.25', '10.'].map(positiveNumber('--add-budget'))).toEqual([2, 0.5, 0.25, 10]);
    expect(['1', '20', '007'].map(positiveInteger('--limit'))).toEqual([1, 20, 7]);
  });

  it.each(['0x10', '1e3', '0b11', '0o7', ' 5', '5 ', '', 'Infinity', '-1', '0', '+2', '1_000'])(
    'refuse %j, naming the option',
    (value) => {
      expect(() => positiveNumber('--add-budget')(value)).toThrow('--add-budget must be a positive number of dollars');
      expect(() => positiveInteger('--limit')(value)).toThrow('--limit must be a positive whole number');
    },
  );

  it('refuse a fraction or an unsafe integer as a count', () => {
    expect(() => positiveInteger('--limit')('1.5')).toThrow('--limit must be a positive whole number');
    expect(() => positiveInteger('--limit')('9007199254740993')).toThrow('--limit must be a positive whole number');
  });
});

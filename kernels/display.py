"""Output that shares the terminal with progress bars: the one bar helper every script and
the Evaluator use, and a print that does not cut into a bar being drawn.
"""
import os


def progress_bar(total, desc, unit):
    """A tqdm bar on stderr. Only on a terminal: in a log file every redraw stays, a line
    cut short by the next. A fixed width where the terminal reports none (tqdm draws an
    empty line there). Erased when closed (leave=False): the lines printed between bars, a
    step's numbers or a table, follow one another with no finished or blank bar between."""
    import sys
    from tqdm import tqdm
    try:
        cols = os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError):
        cols = 0
    return tqdm(total=total, desc=desc, unit=unit, leave=False, disable=not sys.stderr.isatty(),
                dynamic_ncols=bool(cols), ncols=None if cols else 100)


def say(text, file=None):
    """print(text) that does not cut into a progress bar being drawn: the bar is cleared, the
    line printed, the bar drawn again under it."""
    import sys
    from tqdm import tqdm
    tqdm.write(text, file=file or sys.stdout)

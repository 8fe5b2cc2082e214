"""Bounds on a preset's download that huggingface_hub does not set.

huggingface_hub's timeouts are per read, and its retries start afresh after
any data. So a server that sends a byte now and then, or one that cuts a
file at the same place every time and ignores the Range request to resume it
(each retry then starts over from the first byte), would hold a load
forever: 356 requests in 5 minutes, with no end. Two bounds end it with a
clear error: by time, a file must grow past the largest size it had within
KBERT_DOWNLOAD_TIMEOUT seconds; by count, a file may start over from its
first byte at most MAX_RESTARTS times.
"""

import os
import threading
import time

from huggingface_hub.utils import tqdm as hf_tqdm

# Starting over is how huggingface_hub (1.6 and later) answers a server that
# ignores Range: the file comes again from its first byte. A cut on a flaky
# link is met again a few times at most; a server that cuts every response at
# the same place never gets further.
MAX_RESTARTS = 3


class Progress:
    """What the download thread is doing, for the watchdog in the caller's
    thread, and the count of restarts that the download thread enforces."""

    def __init__(self, what, how, endpoint):
        self.what, self.how, self.endpoint = what, how, endpoint
        self.file = None
        self.last = time.monotonic()  # when a partial file last grew past its largest size
        self.largest = {}  # partial file -> the largest size it has had
        self.restarts = 0  # of the file being downloaded
        self.given_up = False
        self.error = None  # raised in the download thread by the count of restarts

    def start(self, filename):
        if self.given_up:  # the caller has had its error: fetch no more
            raise TimeoutError(f"Download given up before {filename}.")
        self.file, self.restarts = filename, 0
        self.last = time.monotonic()

    def saw(self, partial_files):
        """Progress is a partial file growing past the largest size it had: a
        download that starts over and gets as far as before gets nowhere,
        however many bytes arrive."""
        grown = {name: size for name, size in partial_files.items() if size > self.largest.get(name, -1)}
        if grown:
            self.largest.update(grown)
            self.last = time.monotonic()

    def arrived(self, count):
        """Called in the download thread with each piece's bytes, and with
        minus the bytes it had when the download starts over."""
        if self.given_up:  # stops the thread, once the caller has had its error
            raise TimeoutError(f"Download of {self.file} given up.")
        if count >= 0:
            return
        self.restarts += 1
        if self.restarts > MAX_RESTARTS:
            self.error = ConnectionError(
                f"Downloading {self.file} of {self.what} from {self.endpoint} was cut short {self.restarts} times, "
                "and each time the server sent it again from its first byte (it ignores the Range request to "
                f"resume), so it was given up after {self.restarts + 1} attempts; no part of it is cached as a "
                f"whole file. Run it again later. {self.how}"
            )
            raise self.error


def progress_bar(progress):
    """huggingface_hub's progress bar class (for hf_hub_download's
    `tqdm_class`, 1.2 and later), reporting each update to `progress`."""

    class ProgressBar(hf_tqdm):
        def update(self, n=1):
            progress.arrived(n)
            return super().update(n)

    return ProgressBar


def without_stalls(download, storage, stall_s, what, how, endpoint):
    """Runs `download(progress)` in a thread and gives up, with a clear error,
    once no partial file (`*.incomplete`, which every huggingface_hub version
    writes into the cache's blobs/ folder in `storage`) has grown past its
    largest size for `stall_s` seconds.

    Where `download` passes `progress_bar(progress)` on, the thread stops at
    its next piece once the download is given up; with a huggingface_hub
    without `tqdm_class` (before 1.2), a file given up on goes on in the
    daemon thread until huggingface_hub's own timeouts and retries end it (it
    never names a partial file), and no further file is fetched.
    """
    progress, outcome = Progress(what, how, endpoint), {}

    def run():
        try:
            outcome["folder"] = download(progress)
        except Exception as e:  # handed to the caller's thread as is
            outcome["error"] = e

    thread = threading.Thread(target=run, name=f"kbert download {what}", daemon=True)
    thread.start()
    progress.saw(partial_files(storage))
    try:
        while thread.is_alive():
            thread.join(min(1.0, stall_s / 4))
            progress.saw(partial_files(storage))
            if thread.is_alive() and time.monotonic() - progress.last > stall_s:
                got = max(progress.largest.values(), default=0)
                raise TimeoutError(
                    f"Downloading {progress.file} of {what} from {endpoint} made no progress for {stall_s:g} s "
                    f"(it got no further than {got:,} bytes), so it was given up; no part of it is cached as a "
                    "whole file. Run it again, or raise KBERT_DOWNLOAD_TIMEOUT (seconds, now "
                    f"{stall_s:g}) on a slow connection. {how}"
                )
    finally:
        progress.given_up = True  # also on Ctrl-C
    if "error" in outcome:
        raise outcome["error"]
    return outcome["folder"]


def partial_files(storage):
    """{name: size} of the partial files in a cache entry's blobs/ folder."""
    blobs = os.path.join(storage, "blobs")
    try:
        return {e.name: e.stat().st_size for e in os.scandir(blobs) if e.name.endswith(".incomplete")}
    except OSError:
        return {}

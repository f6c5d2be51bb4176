"""Replay memory that stores every environment frame once and rebuilds stacks by index.

Why this layout: a (4, 84, 84) observation shares 3 of its 4 frames with the next one, so
storing ``obs`` and ``next_obs`` per transition would keep each frame 8 times. Here the
ring holds single frames (uint8, on the learner's device) and one record per frame:

    slot of record g:  frame_g, prev_g, action, reward, terminated, first

``prev_g`` is the global id of the previous frame of the same environment stream
(``g`` itself for the first frame of an episode). A record that is not an episode's first
frame is also the *destination* of one transition: the action taken at frame ``prev_g``,
the reward and the terminal flag that led to frame ``g``. Sampling picks destinations and
follows ``prev`` pointers ``stack`` times:

    chain c0 = g, c1 = prev[c0], c2 = prev[c1], ...
    next_obs = frames[c_{stack-1} .. c0],  obs = frames[c_stack .. c1]

At an episode's start the chain stops moving (``prev`` of the first frame is itself), so
stacks are padded with the reset frame: exactly what gymnasium's
``FrameStackObservation(padding_type="reset")`` feeds the policy. Pointers are global ids
rather than slots, so a pointer to a frame the ring has overwritten is recognised
(``id < total - capacity``) and that sample is rejected instead of mixing episodes.

For n-step returns each record also keeps ``next_g``, the global id of the next frame
of its stream once that frame has arrived (-1 until then). An n-step sample starts as a
one-step one (its destination ``c0`` and the stack behind it give ``obs``) and walks
``next`` pointers from ``c0`` up to ``n - 1`` more times, stopping at a terminal frame
or at the newest frame of its stream; its ``next_obs`` is the stack ending where the walk
stopped, its reward the discounted sum of the rewards on the way, and its ``discount``
``gamma ** m`` for the ``m`` steps it took.

Because records carry their own ``prev`` pointer, many collectors and environments can
push interleaved batches into one ring: each push only names, per record, the previous
record of the same stream (inside the push, or "the stream's last record" from an
earlier push). Collectors therefore send one 84x84 frame per step instead of two stacks:
8x less traffic than ``(obs, next_obs)`` pairs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

__all__ = ["PREV_EARLIER_PUSH", "PREV_NONE", "FrameReplay"]

#: ``prev`` value in a push: the previous frame of this stream is the stream's last record
#: from an earlier push.
PREV_EARLIER_PUSH = -1
#: ``prev`` value in a push: this frame starts an episode (no previous frame).
PREV_NONE = -2


class FrameReplay:
    """Ring of single frames with per-record back pointers (see module docstring).

    Not thread-safe: the learner serialises :meth:`add` and :meth:`sample` with a lock
    (its pushes and its training thread use the ring at once).

    Args:
        capacity: Frames (records) held; the oldest are overwritten first.
        frame_shape: Shape of one stored frame (``(84, 84)`` on Atari, ``(4,)`` on
            CartPole).
        frame_dtype: Dtype of stored frames (uint8 on Atari).
        stack: Frames per observation (4 on Atari, 1 otherwise). With 1, observations have
            ``frame_shape``; otherwise ``(stack, *frame_shape)``.
        device: Where everything lives; the learner's GPU when it has one, so pushes that
            arrive as CUDA tensors are copied device-to-device.
        seed: Seed of the sampling generator.
    """

    def __init__(
        self,
        capacity: int,
        frame_shape: Sequence[int],
        frame_dtype: torch.dtype,
        stack: int,
        device: torch.device | str = "cpu",
        seed: int = 0,
    ) -> None:
        if capacity < 2:
            raise ValueError(f"capacity={capacity} must be >= 2")
        if stack < 1:
            raise ValueError(f"stack={stack} must be >= 1")
        self.capacity = int(capacity)
        self.stack = int(stack)
        self.device = torch.device(device)
        self.frame_shape = tuple(int(d) for d in frame_shape)
        # torch.empty: pages are only touched (and on CPU, only committed) as the ring fills.
        self.frames = torch.empty(
            (self.capacity, *self.frame_shape), dtype=frame_dtype, device=self.device
        )
        self.prev = torch.zeros(self.capacity, dtype=torch.int64, device=self.device)
        self.next = torch.full((self.capacity,), -1, dtype=torch.int64, device=self.device)
        self.first = torch.ones(self.capacity, dtype=torch.bool, device=self.device)
        self.actions = torch.zeros(self.capacity, dtype=torch.int64, device=self.device)
        self.rewards = torch.zeros(self.capacity, dtype=torch.float32, device=self.device)
        self.terminated = torch.zeros(self.capacity, dtype=torch.float32, device=self.device)
        self.total = 0  # records ever written; record g lives in slot g % capacity
        self.transitions_added = 0  # records that are transition destinations
        self._last: dict[int, int] = {}  # stream -> global id of its newest record
        self._gen = torch.Generator(device=self.device)
        # [oldest, total] on the device, for sampling captured in a CUDA graph, where a
        # Python number would be baked in at capture (sample(graph_safe=True)); made by
        # the first such sample, so that pushes to an eager learner skip its update.
        self._span: torch.Tensor | None = None
        self._gen.manual_seed(seed)

    def __len__(self) -> int:
        """Records currently held."""
        return min(self.total, self.capacity)

    @property
    def oldest(self) -> int:
        """Global id of the oldest record still in the ring."""
        return max(0, self.total - self.capacity)

    @property
    def nbytes(self) -> int:
        """Bytes of frame storage (the bulk of the memory)."""
        return self.frames.numel() * self.frames.element_size()

    def add(self, batch: Mapping[str, torch.Tensor]) -> int:
        """Appends one push of records.

        Args:
            batch: ``frame`` (n, *frame_shape); ``stream`` (n,) int64, any stable id per
                environment; ``prev`` (n,) int64, the index inside this push of the
                previous record of the same stream, or :data:`PREV_EARLIER_PUSH`, or
                :data:`PREV_NONE` for an episode's first frame; ``action`` (n,) int64,
                ``reward`` (n,) float32, ``terminated`` (n,) bool: the transition that
                ended at this frame (ignored for first frames).

        Returns:
            Number of transitions (non-first records) added.
        """
        frame = batch["frame"]
        n = int(frame.shape[0])
        if n == 0:
            return 0
        if n > self.capacity:
            raise ValueError(f"a push of {n} records does not fit a ring of {self.capacity}")
        if tuple(frame.shape[1:]) != self.frame_shape:
            raise ValueError(f"frame shape {tuple(frame.shape[1:])} != {self.frame_shape}")
        # Pointer arithmetic on the CPU (a few hundred ints); bulk data goes straight to
        # the device.
        prev_local = batch["prev"].to("cpu", torch.int64)
        streams = batch["stream"].to("cpu", torch.int64).tolist()
        ids = torch.arange(self.total, self.total + n, dtype=torch.int64)
        prev_ids = torch.where(prev_local >= 0, self.total + prev_local, ids)
        for k in torch.nonzero(prev_local == PREV_EARLIER_PUSH).flatten().tolist():
            # Unknown stream (e.g. after a learner restart): treat as an episode start, so
            # no transition is made up from a frame we never saw.
            prev_ids[k] = self._last.get(streams[k], self.total + k)
        for k, s in enumerate(streams):  # ids[k] is total + k: Python ints, no tensor op
            self._last[s] = self.total + k
        first = prev_ids == ids

        slots = self._put(ids % self.capacity)
        self.frames[slots] = self._put(frame)
        self.prev[slots] = self._put(prev_ids)
        # Forward links, after the new records' own are cleared: a record's successor is
        # set once it arrives (in this push or a later one), if the record is still held.
        self.next[slots] = -1
        linked = (prev_ids != ids) & (prev_ids >= max(0, self.total + n - self.capacity))
        self.next[self._put(prev_ids[linked] % self.capacity)] = self._put(ids[linked])
        self.first[slots] = self._put(first)
        self.actions[slots] = self._put(batch["action"], torch.int64)
        self.rewards[slots] = self._put(batch["reward"], torch.float32)
        self.terminated[slots] = self._put(batch["terminated"], torch.float32)
        self.total += n
        if self._span is not None:
            self._span.copy_(self._put(torch.tensor([self.oldest, self.total])))
        added = int((~first).sum())
        self.transitions_added += added
        return added

    def _put(self, t: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """``t`` on the ring's device, as ``dtype``, without waiting for the device.

        A copy from pageable host memory may wait for the kernels queued before it (a
        training step's); from pinned memory it is queued behind them instead.
        """
        if dtype is not None and t.device.type == "cpu":
            t = t.to(dtype)
        if self.device.type == "cuda" and t.device.type == "cpu":
            t = t.pin_memory()
        return t.to(device=self.device, dtype=dtype, non_blocking=True)

    def _chains(self, batch_size: int, max_tries: int = 100) -> torch.Tensor:
        """Samples ``batch_size`` valid destinations; returns chains ``(stack+1, B)``."""
        if self.total == 0:
            raise RuntimeError("cannot sample from an empty replay")
        found: list[torch.Tensor] = []
        have = 0
        for _ in range(max_tries):
            # Rejection sampling from uniform ids gives uniform valid transitions;
            # invalid ids (episode starts, chains running off the ring's tail) are rare.
            chains, ok = self._candidates(2 * batch_size)
            chains = chains[:, ok]
            found.append(chains)
            have += chains.shape[1]
            if have >= batch_size:
                return torch.cat(found, dim=1)[:, :batch_size]
        raise RuntimeError(
            f"replay has too few valid transitions to sample {batch_size} "
            f"({have} found in {max_tries} tries); wait for more data before sampling"
        )

    def _candidates(self, n: int, graph_safe: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` uniform candidate ids with their chains ``(stack+1, n)``, and which are valid.

        Reads nothing back from the device. ``graph_safe``: the bounds come from the
        device and the draw from the default generator (see :meth:`sample`).
        """
        oldest: int | torch.Tensor
        if graph_safe:
            if self._span is None:  # an eager first call (a graph's warm-up) makes it
                self._span = self._put(torch.tensor([self.oldest, self.total]))
            oldest, total = self._span[0], self._span[1]
            u = torch.rand(n, dtype=torch.float64, device=self.device)
            cand = oldest + (u * (total - oldest)).long()
        else:
            oldest = self.oldest
            cand = torch.randint(oldest, self.total, (n,), device=self.device, generator=self._gen)
        chain = [cand]
        ok = ~self.first[cand % self.capacity]
        cur = cand
        for _ in range(self.stack):
            # Read a pointer, then check it still names a live frame. A garbage pointer
            # read from an overwritten slot only matters if every earlier hop was valid,
            # and then this check catches it.
            cur = self.prev[cur % self.capacity]
            ok &= cur >= oldest
            chain.append(cur)
        return torch.stack(chain), ok

    def _draw(self, batch_size: int, graph_safe: bool = False) -> torch.Tensor:
        """Like :meth:`_chains`, without reading anything back from the device.

        Draws ``2 * batch_size`` candidates and keeps the first ``batch_size`` valid ones
        in draw order (a stable sort puts valid candidates first), which are uniform over
        valid transitions as the candidates are independent. Should fewer than
        ``batch_size`` of them be valid (for Atari or CartPole episodes, with a replay past
        a few hundred transitions, a chance far below 1e-9), the valid ones are reused
        in turn. The caller must know that the ring holds at least one valid transition
        (the learner samples only past ``learning_starts``): nothing here can check it
        without waiting for the device.
        """
        if self.total == 0:
            raise RuntimeError("cannot sample from an empty replay")
        chains, ok = self._candidates(2 * batch_size, graph_safe)  # (stack+1, n), (n,)
        order = torch.argsort((~ok).to(torch.int32), stable=True)
        count = ok.sum().clamp_(min=1)
        pick = order[torch.arange(batch_size, device=self.device) % count]
        return chains[:, pick]

    def sample(
        self,
        batch_size: int,
        *,
        check: bool = True,
        n_step: int = 1,
        gamma: float = 0.99,
        graph_safe: bool = False,
    ) -> dict[str, torch.Tensor]:
        """Uniformly samples transitions (n-step ones with ``n_step`` above 1).

        Args:
            batch_size: Transitions to sample.
            check: True: rejection sampling that counts the valid candidates on the host
                (one device sync per try) and raises when the ring holds too few. False:
                no device sync at all (:meth:`_draw`), which keeps a GPU learner's queue
                of kernels full; for callers that know the ring holds valid transitions.
            n_step: Steps each sample spans at most (see the module docstring).
            gamma: The discount the n-step rewards are summed with.
            graph_safe: A call that can be captured in a CUDA graph and replayed while
                the ring grows: the ring's bounds are read on the device, candidates are
                drawn with the device's default generator (the one CUDA graphs advance
                on each replay), and nothing is checked on the host (``check`` is
                ignored). The same distribution as without it.

        Returns:
            ``obs`` and ``next_obs`` (B, stack, *frame_shape) (or (B, *frame_shape) when
            ``stack == 1``), ``action`` (B,) int64, ``reward`` (B,) float32,
            ``terminated`` (B,) float32, and ``index`` (B,) the global ids of the
            destination frames of the first steps (for tests and debugging); with
            ``n_step`` above 1 also ``discount`` (B,) float32, ``gamma`` to the power of
            the steps each sample took, and ``last`` (B,) the global ids of the frames
            ``next_obs`` ends at. All on the replay's device.
        """
        if n_step < 1:
            raise ValueError(f"n_step={n_step} must be >= 1")
        if graph_safe:
            chains = self._draw(batch_size, graph_safe=True)
        else:
            chains = self._chains(batch_size) if check else self._draw(batch_size)
        slots = chains % self.capacity  # (stack+1, B)
        dest = slots[0]
        # chains[k] is k frames back from the destination. One gather of stack+1 frames
        # per sample serves both stacks (they share stack-1 frames), oldest first:
        # obs = c_stack .. c1, next_obs = c_{stack-1} .. c0.
        frames = self.frames[slots.flip(0).T]  # (B, stack+1, *frame_shape)
        obs, next_obs = frames[:, :-1], frames[:, 1:]
        if self.stack == 1:
            obs, next_obs = obs[:, 0], next_obs[:, 0]
        out = {
            "obs": obs,
            "next_obs": next_obs,
            "action": self.actions[dest],
            "reward": self.rewards[dest],
            "terminated": self.terminated[dest],
            "index": chains[0],
        }
        if n_step > 1:
            out.update(self._onwards(chains[0], out["reward"], out["terminated"], n_step, gamma))
        return out

    def _onwards(
        self,
        first: torch.Tensor,
        reward: torch.Tensor,
        done: torch.Tensor,
        n_step: int,
        gamma: float,
    ) -> dict[str, torch.Tensor]:
        """The rest of n-step samples whose first steps end at ``first`` (global ids)."""
        cur, reward, done = first, reward.clone(), done.clone()
        discount = torch.full_like(reward, gamma)
        for _ in range(n_step - 1):
            ahead = self.next[cur % self.capacity]
            # On only from a frame that is not terminal and has a successor: a successor
            # is newer than its frame, so it is still held whenever the frame is.
            go = (done == 0) & (ahead >= 0)
            cur = torch.where(go, ahead, cur)
            at = cur % self.capacity
            reward += torch.where(go, discount * self.rewards[at], 0.0)
            done = torch.where(go, self.terminated[at], done)
            discount = torch.where(go, discount * gamma, discount)
        chain = [cur]
        for _ in range(self.stack - 1):
            chain.append(self.prev[chain[-1] % self.capacity])
        next_obs = self.frames[(torch.stack(chain).flip(0) % self.capacity).T]
        if self.stack == 1:
            next_obs = next_obs[:, 0]
        return {
            "next_obs": next_obs,
            "reward": reward,
            "terminated": done,
            "discount": discount,
            "last": cur,
        }

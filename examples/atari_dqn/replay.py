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

With ``priority_exponent`` above 0 the ring is a prioritized replay (Schaul et al. 2016,
as Ape-X's learner keeps it): each record that is a transition destination holds a
priority, ``(|TD error| + floor) ** priority_exponent`` once the learner has trained on
it (:meth:`FrameReplay.update_priorities`) and the highest error seen so far until
then, and candidates are drawn in proportion to it by inverse-CDF sampling over the
ring (a cumulative sum and a binary search: device ops that a CUDA graph can capture,
no sum tree walked from Python). Each sample carries its importance-sampling weight.

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
        priority_exponent: 0: uniform sampling. Above 0: prioritized sampling, each
            transition drawn in proportion to its priority to this power (Ape-X: 0.6).
        priority_weight: The importance-sampling exponent of a prioritized replay's
            samples: a sample drawn with probability ``P`` weighs ``(N * P) ** -beta``,
            divided by its batch's largest (Ape-X: 0.4, kept constant).
    """

    #: Added to an absolute TD error before it becomes a priority, so that a transition
    #: the network already predicts exactly can still be drawn.
    PRIORITY_FLOOR = 1e-6

    def __init__(
        self,
        capacity: int,
        frame_shape: Sequence[int],
        frame_dtype: torch.dtype,
        stack: int,
        device: torch.device | str = "cpu",
        seed: int = 0,
        priority_exponent: float = 0.0,
        priority_weight: float = 0.4,
    ) -> None:
        if capacity < 2:
            raise ValueError(f"capacity={capacity} must be >= 2")
        if stack < 1:
            raise ValueError(f"stack={stack} must be >= 1")
        if not priority_exponent >= 0:
            raise ValueError(f"priority_exponent={priority_exponent} must be >= 0 (0: uniform)")
        if not 0 <= priority_weight <= 1:
            raise ValueError(f"priority_weight={priority_weight} must be in [0, 1]")
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
        self.priority_exponent = float(priority_exponent)
        self.priority_weight = float(priority_weight)
        # Each slot's priority to the exponent (0: not a transition, or not written yet),
        # and the highest raw priority seen, which new transitions get: both stay on the
        # device, so a graphed step updates them without a sync.
        self.priority: torch.Tensor | None = None
        self._max_priority = torch.ones((), dtype=torch.float32, device=self.device)
        if self.priority_exponent > 0:
            # One slot more than the ring: updates for records overwritten since they
            # were drawn are written there, where nothing reads them (dropping them would
            # need their count on the host, which a graphed step cannot read).
            self._priorities = torch.zeros(
                self.capacity + 1, dtype=torch.float32, device=self.device
            )
            self.priority = self._priorities[: self.capacity]

    @property
    def prioritized(self) -> bool:
        """Whether transitions are drawn by priority (``priority_exponent`` above 0)."""
        return self.priority is not None

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
        first_here = self._put(first)
        self.first[slots] = first_here
        if self.priority is not None:
            # A new transition is drawn as readily as the worst-predicted one so far, so
            # it is trained on soon; an episode's first frame is no transition's end.
            fresh = self._max_priority.pow(self.priority_exponent)
            self.priority[slots] = torch.where(first_here, 0.0, fresh)
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

    def _chains(
        self, batch_size: int, max_tries: int = 100
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Samples ``batch_size`` valid destinations; returns chains ``(stack+1, B)`` and,
        from a prioritized ring, each one's probability of being drawn (else None)."""
        if self.total == 0:
            raise RuntimeError("cannot sample from an empty replay")
        found: list[torch.Tensor] = []
        probs: list[torch.Tensor] = []
        have = 0
        for _ in range(max_tries):
            # Rejection sampling from uniform ids gives uniform valid transitions;
            # invalid ids (episode starts, chains running off the ring's tail) are rare.
            # By priority: each valid one in proportion to its priority.
            chains, ok, prob = self._candidates(2 * batch_size)
            found.append(chains[:, ok])
            if prob is not None:
                probs.append(prob[ok])
            have += found[-1].shape[1]
            if have >= batch_size:
                prob = torch.cat(probs)[:batch_size] if probs else None
                return torch.cat(found, dim=1)[:, :batch_size], prob
        raise RuntimeError(
            f"replay has too few valid transitions to sample {batch_size} "
            f"({have} found in {max_tries} tries); wait for more data before sampling"
        )

    def _bounds(self, graph_safe: bool) -> tuple[int | torch.Tensor, int | torch.Tensor]:
        """``(oldest, total)``: Python ints, or with ``graph_safe`` 0-d device tensors."""
        if not graph_safe:
            return self.oldest, self.total
        if self._span is None:  # an eager first call (a graph's warm-up) makes it
            self._span = self._put(torch.tensor([self.oldest, self.total]))
        return self._span[0], self._span[1]

    def _candidates(
        self, n: int, graph_safe: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """``n`` candidate ids with their chains ``(stack+1, n)``, which are valid, and
        (prioritized) their probabilities: drawn uniformly, or by priority.

        Reads nothing back from the device. ``graph_safe``: the bounds come from the
        device and the draw from the default generator (see :meth:`sample`).
        """
        oldest, total = self._bounds(graph_safe)
        gen = None if graph_safe else self._gen
        prob: torch.Tensor | None = None
        if self.priority is not None:
            cand, prob = self._by_priority(n, total, gen)
        elif graph_safe:
            u = torch.rand(n, dtype=torch.float64, device=self.device)
            cand = oldest + (u * (total - oldest)).long()
        else:
            cand = torch.randint(self.oldest, self.total, (n,), device=self.device, generator=gen)
        chain = [cand]
        ok = ~self.first[cand % self.capacity]
        if prob is not None:
            ok &= prob > 0  # a slot not written yet (reached only by rounding)
        cur = cand
        for _ in range(self.stack):
            # Read a pointer, then check it still names a live frame. A garbage pointer
            # read from an overwritten slot only matters if every earlier hop was valid,
            # and then this check catches it.
            cur = self.prev[cur % self.capacity]
            ok &= cur >= oldest
            chain.append(cur)
        return torch.stack(chain), ok, prob

    def _by_priority(
        self, n: int, total: int | torch.Tensor, gen: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` ids drawn in proportion to their slots' priorities, and their probabilities.

        Inverse-CDF sampling: uniform points on the priorities' running sum (float64, so
        a million slots add up without losing the small ones), each mapped to the slot
        whose interval holds it by a binary search. A slot's global id is the newest one
        below ``total`` that lives there.
        """
        assert self.priority is not None
        cdf = torch.cumsum(self.priority, 0, dtype=torch.float64)
        mass = cdf[-1]
        u = torch.rand(n, dtype=torch.float64, device=self.device, generator=gen) * mass
        slot = torch.searchsorted(cdf, u, right=True).clamp_(max=self.capacity - 1)
        laps = torch.div(total - 1 - slot, self.capacity, rounding_mode="floor")
        return slot + self.capacity * laps, self.priority[slot].double() / mass

    def _draw(
        self, batch_size: int, graph_safe: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Like :meth:`_chains`, without reading anything back from the device.

        Draws ``2 * batch_size`` candidates and keeps the first ``batch_size`` valid ones
        in draw order (a stable sort puts valid candidates first), which are distributed
        as valid transitions are drawn (uniformly, or by priority) as the candidates are
        independent. Should fewer than ``batch_size`` of them be valid (for Atari or
        CartPole episodes, with a replay past a few hundred transitions, a chance far
        below 1e-9), the valid ones are reused in turn. The caller must know that the
        ring holds at least one valid transition (the learner samples only past
        ``learning_starts``): nothing here can check it without waiting for the device.
        """
        if self.total == 0:
            raise RuntimeError("cannot sample from an empty replay")
        chains, ok, prob = self._candidates(2 * batch_size, graph_safe)  # (stack+1, n), (n,)
        order = torch.argsort((~ok).to(torch.int32), stable=True)
        count = ok.sum().clamp_(min=1)
        pick = order[torch.arange(batch_size, device=self.device) % count]
        return chains[:, pick], None if prob is None else prob[pick]

    def sample(
        self,
        batch_size: int,
        *,
        check: bool = True,
        n_step: int = 1,
        gamma: float = 0.99,
        graph_safe: bool = False,
    ) -> dict[str, torch.Tensor]:
        """Samples transitions (n-step ones with ``n_step`` above 1), uniformly or by priority.

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
            destination frames of the first steps (what :meth:`update_priorities` takes);
            from a prioritized ring also ``weight`` (B,) float32, the samples'
            importance-sampling weights (see ``priority_weight``); with
            ``n_step`` above 1 also ``discount`` (B,) float32, ``gamma`` to the power of
            the steps each sample took, and ``last`` (B,) the global ids of the frames
            ``next_obs`` ends at. All on the replay's device.
        """
        if n_step < 1:
            raise ValueError(f"n_step={n_step} must be >= 1")
        if graph_safe:
            chains, prob = self._draw(batch_size, graph_safe=True)
        else:
            chains, prob = self._chains(batch_size) if check else self._draw(batch_size)
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
        if prob is not None:
            oldest, total = self._bounds(graph_safe)
            # (N P)^-beta over the records held, divided by the batch's largest, so that
            # weights only ever scale a loss down (as Schaul et al. and Ape-X do).
            weight = (prob * (total - oldest)).pow(-self.priority_weight)
            out["weight"] = (weight / weight.max()).float()
        if n_step > 1:
            out.update(self._onwards(chains[0], out["reward"], out["terminated"], n_step, gamma))
        return out

    def update_priorities(self, index: torch.Tensor, td_error: torch.Tensor) -> None:
        """Sets the priorities of the transitions a batch trained on.

        Reads nothing back from the device, so a graphed step can include it. A sample
        whose record a push has overwritten since it was drawn keeps the newcomer's
        priority. Of a record drawn twice in one batch, either error may stay.

        Args:
            index: (B,) the samples' global ids (``sample()["index"]``).
            td_error: (B,) their absolute TD errors (``dqn_loss``'s third value).

        Raises:
            RuntimeError: On a uniform replay (``priority_exponent`` 0).
        """
        if self.priority is None:
            raise RuntimeError(
                "update_priorities needs a prioritized replay (priority_exponent > 0)"
            )
        raw = td_error.detach().float().abs() + self.PRIORITY_FLOOR
        oldest, _ = self._bounds(graph_safe=self._span is not None)  # a graph's: on the device
        # A stale sample's slot may also be in this batch under its newcomer's id: its
        # write goes to the spare slot, so it cannot win over the newcomer's.
        slot = torch.where(index >= oldest, index % self.capacity, self.capacity)
        self._priorities[slot] = raw.pow(self.priority_exponent)
        torch.maximum(self._max_priority, raw.max(), out=self._max_priority)

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

"""Tensor-by-tensor reference optimizers: the published formulas the fused optimizers are
checked against where torch.optim has no counterpart (Ascend's LAMB, RMSpropTF, AdamP,
BertAdam; NVIDIA's LAMB, NovoGrad and variants). Shared by the reference and fuzz tests."""

from __future__ import annotations

import math

import torch


class ReferenceLamb(torch.optim.Optimizer):
    """Ascend / pytorch-lamb LAMB, tensor by tensor."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0, adam=False):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.adam = adam

    @torch.no_grad()
    def step(self, divide_grads_by: float = 1.0) -> None:
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad / divide_grads_by
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["exp_avg"].mul_(beta1).add_(grad, alpha=1 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                adam_step = state["exp_avg"] / (state["exp_avg_sq"].sqrt() + group["eps"])
                adam_step = adam_step + group["weight_decay"] * p
                weight_norm = p.norm().clamp(0, 10)
                adam_norm = adam_step.norm()
                trust = 1.0
                if not self.adam and weight_norm != 0 and adam_norm != 0:
                    trust = float(weight_norm / adam_norm)
                p.sub_(group["lr"] * trust * adam_step)


class ReferenceGlobalNormLamb(ReferenceLamb):
    """NpuFusedLamb(use_global_grad_norm=True): grads divided by the global norm when > 1."""

    @torch.no_grad()
    def step(self, divide_grads_by: float = 1.0) -> None:
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        norm = float(torch.sqrt(sum((g * g).sum() for g in grads)))
        super().step(divide_grads_by=norm if norm > 1 else 1.0)


class ReferenceRMSpropTF(torch.optim.Optimizer):
    """timm's RMSpropTF (square_avg starts at ones), with Ascend's decoupled decay."""

    def __init__(
        self,
        params,
        lr=1e-2,
        alpha=0.9,
        eps=1e-10,
        weight_decay=0,
        momentum=0.0,
        centered=False,
        decoupled_decay=False,
        lr_in_momentum=True,
    ):
        super().__init__(
            params,
            dict(
                lr=lr,
                alpha=alpha,
                eps=eps,
                weight_decay=weight_decay,
                momentum=momentum,
                centered=centered,
                decoupled_decay=decoupled_decay,
                lr_in_momentum=lr_in_momentum,
            ),
        )

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["square_avg"] = torch.ones_like(p)
                    state["momentum_buffer"] = torch.zeros_like(p)
                    state["grad_avg"] = torch.zeros_like(p)
                grad = p.grad
                if group["weight_decay"]:
                    if group["decoupled_decay"]:
                        p.mul_(1 - group["weight_decay"])
                    else:
                        grad = grad + group["weight_decay"] * p
                square_avg = state["square_avg"]
                square_avg.add_((1 - group["alpha"]) * (grad * grad - square_avg))
                if group["centered"]:
                    grad_avg = state["grad_avg"]
                    grad_avg.add_((1 - group["alpha"]) * (grad - grad_avg))
                    avg = torch.sqrt(square_avg - grad_avg * grad_avg + group["eps"])
                else:
                    avg = torch.sqrt(square_avg + group["eps"])
                if group["momentum"] > 0:
                    buf = state["momentum_buffer"]
                    if group["lr_in_momentum"]:
                        buf.mul_(group["momentum"]).add_(group["lr"] * grad / avg)
                        p.sub_(buf)
                    else:
                        buf.mul_(group["momentum"]).add_(grad / avg)
                        p.sub_(group["lr"] * buf)
                else:
                    p.sub_(group["lr"] * grad / avg)


class ReferenceAdamP(torch.optim.Optimizer):
    """AdamP (clovaai), tensor by tensor."""

    def __init__(
        self,
        params,
        lr=1e-3,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=0,
        delta=0.1,
        wd_ratio=0.1,
        nesterov=False,
    ):
        super().__init__(
            params,
            dict(
                lr=lr,
                betas=betas,
                eps=eps,
                weight_decay=weight_decay,
                delta=delta,
                wd_ratio=wd_ratio,
                nesterov=nesterov,
            ),
        )

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad, state = p.grad, self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                bc1 = 1 - beta1 ** state["step"]
                bc2 = 1 - beta2 ** state["step"]
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                exp_avg.mul_(beta1).add_((1 - beta1) * grad)
                exp_avg_sq.mul_(beta2).add_((1 - beta2) * grad * grad)
                denom = exp_avg_sq.sqrt() / math.sqrt(bc2) + group["eps"]
                if group["nesterov"]:
                    perturb = (beta1 * exp_avg + (1 - beta1) * grad) / denom
                else:
                    perturb = exp_avg / denom
                wd_ratio = 1.0
                if p.dim() > 1 and p.numel() > 0:
                    perturb, wd_ratio = self._projection(p, grad, perturb, group)
                if group["weight_decay"] > 0:
                    p.mul_(1 - group["lr"] * group["weight_decay"] * wd_ratio)
                p.sub_(group["lr"] / bc1 * perturb)

    @staticmethod
    def _projection(p, grad, perturb, group):
        eps = group["eps"]
        expand = [-1] + [1] * (p.dim() - 1)
        for view in (lambda x: x.reshape(x.size(0), -1), lambda x: x.reshape(1, -1)):
            x, y = view(grad), view(p)
            cosine = (x * y).sum(1).abs() / (x.norm(dim=1) + eps) / (y.norm(dim=1) + eps)
            if cosine.max() < group["delta"] / math.sqrt(view(p).size(1)):
                unit = p / (view(p).norm(dim=1).view(expand) + eps)
                perturb = perturb - unit * view(unit * perturb).sum(1).view(expand)
                return perturb, group["wd_ratio"]
        return perturb, 1.0


def _schedule(name: str, x: float, warmup: float) -> float:
    if x < warmup:
        return x / warmup
    return {
        "warmup_cosine": lambda: 0.5 * (1 + math.cos(math.pi * x)),
        "warmup_constant": lambda: 1.0,
        "warmup_linear": lambda: max((x - 1) / (warmup - 1), 0.0),
        "warmup_poly": lambda: (1 - x) ** 0.5,
    }[name]()


class ReferenceBertAdam(torch.optim.Optimizer):
    """pytorch-pretrained-bert's BertAdam with per-group clipping, tensor by tensor."""

    def __init__(
        self,
        params,
        lr=1e-3,
        warmup=-1,
        t_total=-1,
        schedule="warmup_linear",
        b1=0.9,
        b2=0.999,
        e=1e-6,
        weight_decay=0.01,
        max_grad_norm=1.0,
    ):
        super().__init__(
            params,
            dict(
                lr=lr,
                warmup=warmup,
                t_total=t_total,
                schedule=schedule,
                b1=b1,
                b2=b2,
                e=e,
                weight_decay=weight_decay,
                max_grad_norm=max_grad_norm,
            ),
        )

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if group["max_grad_norm"] > 0 and params:
                norm = float(torch.sqrt(sum((p.grad * p.grad).sum() for p in params)))
                coefficient = group["max_grad_norm"] / (norm + 1e-6)
                if coefficient < 1:
                    for p in params:
                        p.grad.mul_(coefficient)
            for p in params:
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["exp_avg"].mul_(group["b1"]).add_((1 - group["b1"]) * p.grad)
                state["exp_avg_sq"].mul_(group["b2"]).add_((1 - group["b2"]) * p.grad * p.grad)
                update = state["exp_avg"] / (state["exp_avg_sq"].sqrt() + group["e"])
                if group["weight_decay"] > 0:
                    update = update + group["weight_decay"] * p
                lr = group["lr"]
                if group["t_total"] != -1:
                    x = state["step"] / group["t_total"]
                    lr = lr * _schedule(group["schedule"], x, group["warmup"])
                p.sub_(lr * update)
                state["step"] += 1


class ReferenceNvLamb(torch.optim.Optimizer):
    """NVIDIA's LAMB formula, tensor by tensor, with a global-norm pre-division."""

    def __init__(
        self,
        params,
        lr=1e-3,
        betas=(0.9, 0.999),
        eps=1e-6,
        weight_decay=0.01,
        adam_w_mode=True,
        max_grad_norm=1.0,
        grad_averaging=True,
        use_nvlamb=False,
    ):
        super().__init__(
            params,
            dict(
                lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, max_grad_norm=max_grad_norm
            ),
        )
        self.adam_w_mode, self.grad_averaging, self.use_nvlamb = (
            adam_w_mode,
            grad_averaging,
            use_nvlamb,
        )
        self.steps = 0

    @torch.no_grad()
    def step(self) -> None:
        self.steps += 1
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        norm = float(torch.sqrt(sum(((g * g).sum() for g in grads), torch.zeros(()))))
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            beta3 = 1 - beta1 if self.grad_averaging else 1.0
            clip = norm / group["max_grad_norm"] if norm > group["max_grad_norm"] else 1.0
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad / clip
                wd = group["weight_decay"]
                if not self.adam_w_mode:
                    grad = grad + wd * p
                state = self.state.setdefault(p, {})
                m = state.setdefault("m", torch.zeros_like(p))
                v = state.setdefault("v", torch.zeros_like(p))
                m.mul_(beta1).add_(beta3 * grad)
                v.mul_(beta2).add_((1 - beta2) * grad * grad)
                m_hat = m / (1 - beta1**self.steps)
                v_hat = v / (1 - beta2**self.steps)
                update = m_hat / (v_hat.sqrt() + group["eps"])
                if self.adam_w_mode:
                    update = update + wd * p
                ratio = 1.0
                if (wd != 0 or self.use_nvlamb) and p.norm() != 0 and update.norm() != 0:
                    ratio = float(p.norm() / update.norm())
                p.sub_(group["lr"] * ratio * update)


class ReferenceNovoGrad(torch.optim.Optimizer):
    """NovoGrad with per-tensor L2 second moments, tensor by tensor."""

    def __init__(
        self,
        params,
        lr=1e-3,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=0.0,
        reg_inside_moment=False,
    ):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.reg_inside_moment = reg_inside_moment
        self.steps = 0

    @torch.no_grad()
    def step(self) -> None:
        self.steps += 1
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state.setdefault(p, {})
                grad_norm = float(p.grad.norm())
                if "v" not in state:
                    state["v"] = grad_norm
                else:
                    state["v"] = math.sqrt(beta2 * state["v"] ** 2 + (1 - beta2) * grad_norm**2)
                denom = state["v"] / math.sqrt(1 - beta2**self.steps) + group["eps"]
                m = state.setdefault("m", torch.zeros_like(p))
                wd = group["weight_decay"]
                if self.reg_inside_moment:
                    m.mul_(beta1).add_((1 - beta1) * (p.grad / denom + wd * p))
                    p.sub_(group["lr"] * m / (1 - beta1**self.steps))
                else:
                    m.mul_(beta1).add_((1 - beta1) * p.grad)
                    p.sub_(group["lr"] * (m / (1 - beta1**self.steps) / denom + wd * p))


class ReferenceSgdWdAfterMomentum(torch.optim.Optimizer):
    def __init__(self, params, lr, momentum, weight_decay):
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state.setdefault(p, {})
                if "buf" not in state:
                    state["buf"] = p.grad.clone()
                else:
                    state["buf"].mul_(group["momentum"]).add_(p.grad)
                p.sub_(group["lr"] * (state["buf"] + group["weight_decay"] * p))


class ReferenceAdam(torch.optim.Optimizer):
    """Adam without bias correction, decoupled or L2 decay."""

    def __init__(self, params, lr, weight_decay, decoupled, betas=(0.9, 0.999), eps=1e-8):
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, betas=betas, eps=eps))
        self.decoupled = decoupled

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad if self.decoupled else p.grad + group["weight_decay"] * p
                state = self.state.setdefault(p, {})
                m = state.setdefault("m", torch.zeros_like(p))
                v = state.setdefault("v", torch.zeros_like(p))
                m.mul_(beta1).add_((1 - beta1) * grad)
                v.mul_(beta2).add_((1 - beta2) * grad * grad)
                update = m / (v.sqrt() + group["eps"])
                if self.decoupled:
                    update = update + group["weight_decay"] * p
                p.sub_(group["lr"] * update)

"""Reads what ssd_harness wrote (inputs and the emulated kernels' outputs) and prints the
relative error of y and every gradient against PyTorch autograd of the sequential recurrence
in fp64 (run_ssd.sh). Usage: ssd_compare.py B T H P G S CHUNK FILE"""
import sys
import numpy as np
import torch
B,T,H,P,G,S,L = map(int, sys.argv[1:8]); f=sys.argv[8]
N=B*T; di=H*P; C=di+2*G*S; inn=2*di+2*G*S+H
a=np.fromfile(f,dtype=np.float32); o=0
def take(n):
    global o; r=torch.tensor(a[o:o+n],dtype=torch.float64); o+=n; return r
xbc=take(N*C).view(B,T,C); zx=take(N*inn).view(B,T,inn); dy=take(N*di).view(B,T,H,P)
bias=take(H); Alog=take(H); D=take(H); y=take(N*di).view(B,T,H,P); dxbc=take(N*C).view(B,T,C)
dz=take(N*inn).view(B,T,inn); gb=take(H); ga=take(H); gd=take(H)
x=xbc[...,:di].reshape(B,T,H,P).clone().requires_grad_()
Bm=xbc[...,di:di+G*S].reshape(B,T,G,S).clone().requires_grad_()
Cm=xbc[...,di+G*S:].reshape(B,T,G,S).clone().requires_grad_()
dtraw=zx[...,inn-H:].clone().requires_grad_()
bias.requires_grad_(); Alog.requires_grad_(); D.requires_grad_()
dt_=torch.float64
def seq(x, dtraw, dtb, Alog, Bm, Cm, D, G):
    Bn,T,H,P = x.shape; S = Bm.shape[-1]; per = H//G
    dt = torch.nn.functional.softplus(dtraw + dtb)
    A = -torch.exp(Alog)
    ys=[]; st = torch.zeros(Bn,H,P,S,dtype=dt_)
    for t in range(T):
        Bh = Bm[:,t].repeat_interleave(per,1); Ch = Cm[:,t].repeat_interleave(per,1)
        da = torch.exp(dt[:,t]*A)
        st = da[...,None,None]*st + (dt[:,t][...,None]*x[:,t])[...,None]*Bh[:,:,None,:]
        ys.append(torch.einsum('bhps,bhs->bhp', st, Ch) + D[None,:,None]*x[:,t])
    return torch.stack(ys,1)
yr=seq(x,dtraw,bias,Alog,Bm,Cm,D,G); (yr*dy).sum().backward()
def rel(a,b): return ((a-b).norm()/b.norm()).item()
res={'y':rel(y,yr.detach()),'dx':rel(dxbc[...,:di].reshape(B,T,H,P),x.grad),'dB':rel(dxbc[...,di:di+G*S].reshape(B,T,G,S),Bm.grad),
 'dC':rel(dxbc[...,di+G*S:].reshape(B,T,G,S),Cm.grad),'ddt':rel(dz[...,inn-H:],dtraw.grad),'dbias':rel(gb,bias.grad),'dAlog':rel(ga,Alog.grad),'dD':rel(gd,D.grad),
 'untouched':float((dz[...,:inn-H]!=7).sum())}
print(sys.argv[1:8], ' '.join(f'{k}:{v:.1e}' for k,v in res.items()))

"""The login-node side of ``trainc run`` / ``trainc submit``.

Starts torchrun or sbatch on a compiled folder and checks a resume; imports no torch.
"""

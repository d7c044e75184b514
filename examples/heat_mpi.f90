! SPDX-License-Identifier: MIT
!
! heat_mpi.f90 - a 2D heat-equation solver in Fortran under MPI that sends
! every time step to cistern through the simulation client (module cistern).
!
! The grid's rows are split among the ranks (grid must be a multiple of the
! number of ranks), each rank exchanging its edge rows with its neighbours.
! The scheme is demo/heatsim.py's: explicit finite differences with a
! diffusion number of 0.2, Dirichlet boundaries held at four temperatures
! (top, bottom, left, right), the interior starting at an initial one; all
! five, in [0, 1], are the simulation's parameters. It records `steps`
! snapshots, so that the last is near the steady state.
!
!   mpirun -np 2 heat_mpi TARGET MODE GRID STEPS STEP_COST_MS SIM P1 P2 P3 P4 P5 [SIM P1 ... P5]...
!
! TARGET is a segment name or a `cistern serve` endpoint (tcp://HOST:PORT);
! each SIM P1..P5 group is one simulation, run in turn. MODE says what a
! sample is:
!   parts   every rank sends its part of the field: the segment's schema is
!           params:float32[5];t:float32[];part:float32[];u:float32[ROWS,GRID]
!           with ROWS = GRID / ranks, part = rank / ranks and t = step / (STEPS - 1)
!   gather  the parts are gathered on rank 0, which sends the whole field:
!           params:float32[5];t:float32[];u:float32[GRID,GRID]
!           (the layout of demo/heatsim.py's samples)
!   parts-log  as parts, and every rank prints "rank R sim S step T sent"
!           once each step is in (tests kill a rank and check that no step
!           it printed is lost)
! Each client says it is done at the end, so a segment expecting as many
! producers as clients closes its reception.
program heat_mpi
  use, intrinsic :: iso_c_binding
  use mpi
  use cistern
  implicit none

  interface
    integer(c_int) function usleep(us) bind(C, name='usleep')
      import :: c_int
      integer(c_int), value :: us
    end function
  end interface

  real(c_double), parameter :: R = 0.2d0, PI = 3.14159265358979323846d0
  character(len=256) :: target, mode, arg
  integer :: ierr, rank, nranks, grid, steps, cost_ms, rows, nsims, k, t, sub, s, i
  integer(c_int) :: sim_id, rc, fparams, ft, fpart, fu
  real(c_float) :: params(5), tval, part
  real(c_double), allocatable :: u(:, :), un(:, :)
  real(c_float), allocatable :: out(:)
  type(cistern_sim) :: sim
  logical :: gather, log_steps

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  if (command_argument_count() < 11 .or. mod(command_argument_count() - 5, 6) /= 0) &
       call fail('usage: heat_mpi TARGET MODE GRID STEPS STEP_COST_MS SIM P1 P2 P3 P4 P5 [...]')
  call get_command_argument(1, target)
  call get_command_argument(2, mode)
  grid = int_arg(3)
  steps = int_arg(4)
  cost_ms = int_arg(5)
  nsims = (command_argument_count() - 5) / 6
  gather = trim(mode) == 'gather'
  log_steps = trim(mode) == 'parts-log'
  if (.not. gather .and. .not. log_steps .and. trim(mode) /= 'parts') &
       call fail('MODE must be parts, gather or parts-log, not ' // trim(mode))
  if (grid < 4 .or. mod(grid, nranks) /= 0) &
       call fail('GRID must be at least 4 and a multiple of the number of ranks')
  if (steps < 1) call fail('STEPS must be at least 1')
  rows = grid / nranks
  ! u(j, i): column j of local row i; rows 0 and rows+1 hold the neighbours' edges.
  allocate(u(grid, 0:rows + 1), un(grid, 0:rows + 1), out(grid * rows))
  sub = max(1, ceiling(5.0d0 / (R * 2 * PI**2 / (grid - 1)**2) / max(1, steps - 1)))

  do k = 1, nsims
    sim_id = int_arg(6 + 6 * (k - 1))
    do i = 1, 5
      params(i) = real_arg(6 + 6 * (k - 1) + i)
    end do
    if (gather .and. rank /= 0) then
      fu = 0
    else
      rc = cistern_sim_open(target, sim_id, sim)
      if (rc /= 0) call fail(cistern_sim_problem(sim))
      fparams = declare(sim, 'params', 5)
      ft = declare(sim, 't', 1)
      if (gather) then
        fu = declare(sim, 'u', grid * grid)
      else
        fpart = declare(sim, 'part', 1)
        fu = declare(sim, 'u', rows * grid)
      end if
    end if
    call initial(u)
    do t = 0, steps - 1
      if (t > 0) then
        do s = 1, sub
          call iterate(u)
        end do
      end if
      out = reshape(real(u(:, 1:rows), c_float), [grid * rows])
      tval = real(t, c_float) / real(max(1, steps - 1), c_float)
      if (gather) then
        rc = cistern_mpi_gather(sim, fu, out, grid * rows, MPI_COMM_WORLD, 0)
        if (rc /= 0) call fail('gather: ' // cistern_strerror(rc))
        if (rank == 0) call send(t)
      else
        part = real(rank, c_float) / real(nranks, c_float)
        call check(cistern_sim_write(sim, fpart, part))
        call check(cistern_sim_write(sim, fu, out))
        call send(t)
        if (log_steps) then
          write (*, '(a, i0, a, i0, a, i0, a)') 'rank ', rank, ' sim ', sim_id, ' step ', t, ' sent'
          flush (6)
        end if
      end if
      if (cost_ms > 0) rc = usleep(int(cost_ms * 1000, c_int))
    end do
    if (.not. gather .or. rank == 0) then
      call check(cistern_sim_done(sim))
      call check(cistern_sim_close(sim))
    end if
  end do
  call MPI_Finalize(ierr)

contains

  ! Declare a float32 field of n elements; stop on a mismatch with the schema.
  integer(c_int) function declare(sim, name, n)
    type(cistern_sim), intent(in) :: sim
    character(len=*), intent(in) :: name
    integer, intent(in) :: n
    declare = cistern_sim_field(sim, name, CISTERN_FLOAT32, n)
    if (declare < 0) call fail(cistern_sim_problem(sim))
  end function

  ! Write the parameters and the time, then send step t.
  subroutine send(t)
    integer, intent(in) :: t
    call check(cistern_sim_write(sim, fparams, params))
    call check(cistern_sim_write(sim, ft, tval))
    call check(cistern_sim_send(sim, t))
  end subroutine

  subroutine initial(u)
    real(c_double), intent(out) :: u(:, 0:)
    integer :: i, g
    u = params(5)
    do i = 1, rows
      g = rank * rows + i - 1
      if (g == 0) u(:, i) = params(1)
      if (g == grid - 1) u(:, i) = params(2)
      u(1, i) = params(3)
      u(grid, i) = params(4)
    end do
  end subroutine

  ! One explicit step: exchange the edge rows, then update the interior.
  subroutine iterate(u)
    real(c_double), intent(inout) :: u(:, 0:)
    integer :: up, down, i, g, ierr
    up = merge(MPI_PROC_NULL, rank - 1, rank == 0)
    down = merge(MPI_PROC_NULL, rank + 1, rank == nranks - 1)
    call MPI_Sendrecv(u(:, 1), grid, MPI_DOUBLE_PRECISION, up, 1, u(:, rows + 1), grid, &
         MPI_DOUBLE_PRECISION, down, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
    call MPI_Sendrecv(u(:, rows), grid, MPI_DOUBLE_PRECISION, down, 2, u(:, 0), grid, &
         MPI_DOUBLE_PRECISION, up, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
    un = u
    do i = 1, rows
      g = rank * rows + i - 1
      if (g == 0 .or. g == grid - 1) cycle
      un(2:grid - 1, i) = u(2:grid - 1, i) + R * (u(2:grid - 1, i - 1) + u(2:grid - 1, i + 1) &
           + u(1:grid - 2, i) + u(3:grid, i) - 4 * u(2:grid - 1, i))
    end do
    u = un
  end subroutine

  subroutine check(rc)
    integer(c_int), intent(in) :: rc
    if (rc /= 0) call fail(cistern_sim_problem(sim))
  end subroutine

  integer function int_arg(n)
    integer, intent(in) :: n
    integer :: ios
    call get_command_argument(n, arg)
    read (arg, *, iostat=ios) int_arg
    if (ios /= 0) call fail('argument ' // trim(arg) // ' is not an integer')
  end function

  real(c_float) function real_arg(n)
    integer, intent(in) :: n
    integer :: ios
    call get_command_argument(n, arg)
    read (arg, *, iostat=ios) real_arg
    if (ios /= 0) call fail('argument ' // trim(arg) // ' is not a number')
  end function

  subroutine fail(why)
    character(len=*), intent(in) :: why
    integer :: ierr
    write (0, '(a, i0, a, a)') 'heat_mpi: rank ', rank, ': ', why
    call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
    stop 1
  end subroutine
end program heat_mpi

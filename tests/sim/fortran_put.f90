! SPDX-License-Identifier: MIT
!
! fortran_put.f90 - the Fortran side of test_sim's Fortran tests: puts
! samples into the segment named by its first argument, in the way its
! second argument says, for the C test to read back field by field.
!   sim   through the simulation client: 3 steps of sim 7, fields
!         u:float64[2,3] (element i in C order 10*t + i, written from a
!         Fortran array u(3, 2)), step:int32[] (t, from a scalar) and
!         x:float32[4] (x(i) = t + i/4)
!   put   plain puts: one sample of 5 reals and one of 3 doubles, (i) = i/2
!   slot  reserve and commit: a sample of 4 doubles (i) = 100 + i
!   bad   the errors a caller tests: an unknown field, a wrong dtype
! It exits 0 when every call returned what it should, 1 otherwise.
program fortran_put
  use, intrinsic :: iso_c_binding
  use cistern
  implicit none
  character(len=128) :: name, mode
  integer :: i
  integer(c_int) :: t, fu, fs, fx
  type(cistern_sim) :: sim
  type(cistern_segment) :: seg
  type(cistern_slot) :: slot
  real(c_double) :: u(3, 2), d(3)
  real(c_float) :: x(4), r(5)
  integer(c_int32_t) :: step
  real(c_double), pointer :: p(:)

  call get_command_argument(1, name)
  call get_command_argument(2, mode)
  select case (trim(mode))
  case ('sim')
    call expect(cistern_sim_open(name, 7, sim), 0, 'open')
    fu = cistern_sim_field(sim, 'u', CISTERN_FLOAT64, size(u))
    fs = cistern_sim_field(sim, 'step', CISTERN_INT32, 1)
    fx = cistern_sim_field(sim, 'x', CISTERN_FLOAT32, 4)
    if (fu < 0 .or. fs < 0 .or. fx < 0) call die('field: ' // cistern_sim_problem(sim))
    do t = 0, 2
      u = reshape([(10.0d0 * t + i, i = 1, 6)], [3, 2])
      step = t
      x = [(real(t, c_float) + i / 4.0, i = 1, 4)]
      call expect(cistern_sim_write(sim, fu, u(:, 1)), CISTERN_EINVAL, 'write half of u')
    call expect(cistern_sim_write(sim, fu, u), 0, 'write u')
      call expect(cistern_sim_write(sim, fs, step), 0, 'write step')
      call expect(cistern_sim_write(sim, fx, x), 0, 'write x')
      call expect(cistern_sim_send(sim, t), 0, 'send')
    end do
    call expect(cistern_sim_done(sim), 0, 'done')
    call expect(cistern_sim_close(sim), 0, 'close')
  case ('put')
    call expect(cistern_attach(name, seg), 0, 'attach')
    r = [(i / 2.0, i = 1, 5)]
    d = [(i / 2.0d0, i = 1, 3)]
    call expect(cistern_put(seg, r, 5, 1, 0), 0, 'put real')
    call expect(cistern_put(seg, d, 3, 1, 1, 1000), 0, 'put double')
    call expect(cistern_detach(seg), 0, 'detach')
  case ('slot')
    call expect(cistern_attach(name, seg), 0, 'attach')
    call expect(cistern_reserve(seg, slot, p), 0, 'reserve')
    if (size(p) < 4) call die('reserve: a slot too small')
    p(1:4) = [(100.0d0 + i, i = 1, 4)]
    call expect(cistern_commit(seg, slot, 4, 2, 5), 0, 'commit')
    call expect(cistern_reserve(seg, slot, p, 0), 0, 'reserve again')
    call expect(cistern_abort(seg, slot), 0, 'abort')
    call expect(cistern_detach(seg), 0, 'detach')
  case ('bad')
    call expect(cistern_sim_open(name, 1, sim), 0, 'open')
    call expect(cistern_sim_field(sim, 'nope', CISTERN_FLOAT64, 6), CISTERN_ENOENT, 'unknown field')
    if (index(cistern_sim_problem(sim), 'nope') == 0) call die('problem: ' // cistern_sim_problem(sim))
    call expect(cistern_sim_field(sim, 'u', CISTERN_FLOAT32, 6), CISTERN_EPROTOTYPE, 'wrong dtype')
    call expect(cistern_sim_close(sim), 0, 'close')
    call expect(cistern_sim_open('no-such-segment-here', 1, sim), CISTERN_ENOENT, 'open missing')
  case default
    call die('unknown mode ' // trim(mode))
  end select

contains

  subroutine expect(got, want, what)
    integer(c_int), intent(in) :: got, want
    character(len=*), intent(in) :: what
    if (got /= want) then
      write (*, '(a, a, i0, a, i0, a, a)') what, ': got ', got, ' instead of ', want, ': ', &
           cistern_strerror(got)
      stop 1
    end if
  end subroutine

  subroutine die(what)
    character(len=*), intent(in) :: what
    write (*, '(a)') what
    stop 1
  end subroutine
end program fortran_put
